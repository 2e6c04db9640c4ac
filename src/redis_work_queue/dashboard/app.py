"""The dashboard's web application: a Starlette app serving one page and its JSON endpoints.

``GET /`` is the page (what it shows is in its query: ``?queue=&tab=&page=``, ``?queue=&job=``,
``?view=workers``), ``GET /api/overview`` every queue's counts (and one queue's recent samples),
``GET /api/queue?name=...`` one queue's waiting items, leases, dead letters and workers (with
``&tab=waiting|leased|delayed|dead&page=N``: one page of that tab), ``GET /api/job?name=&id=``
one job, ``GET /api/live?name=&since=`` the events of a queue made with ``events=True`` (one
bounded blocking read: the page redraws as they come, and polls a queue without events),
``GET /api/workers`` the live workers of every queue shown and the queues' job
durations, ``GET /api/data`` one item's whole data, and ``POST /api/action`` an action on one
queue, one job or one group (only when actions are enabled, and only with the page's CSRF
token). Redis
being unreachable is answered with status 503 and an error the page shows in a banner; the next
request after Redis is back succeeds.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ipaddress
import logging
import math
import re
import secrets
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import redis
from redis.asyncio import Redis as AsyncRedis
from starlette.applications import Starlette
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from ..aio import AsyncWorkQueue
from ..cli import plural
from ..connect import mask
from ..errors import InvalidArgumentError, WorkQueueError
from ..flow import check_group
from ..keyprefix import KeyPrefix
from ..results import Cancelled
from ..validation import check_refresh_secs
from . import data

logger = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
CSRF_HEADER = "x-csrf-token"
#: The errors that mean Redis cannot be reached right now (the page shows a banner).
UNREACHABLE = (redis.ConnectionError, redis.TimeoutError, OSError)
#: The actions on one job (job control's operations), by id.
JOB_ACTIONS = ("cancel", "promote", "retry")
#: The actions on one group of a queue (fair groups), by name.
GROUP_ACTIONS = ("pause-group", "resume-group")
ACTIONS = ("requeue", "purge", "light-clean", "deep-clean", "flush", *JOB_ACTIONS, *GROUP_ACTIONS)
#: Longest wait between two samples while Redis is unreachable.
MAX_SAMPLE_BACKOFF = 30.0

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


@dataclass(frozen=True)
class DashboardSettings:
    """How the dashboard runs.

    Attributes:
        url: The Redis URL.
        queues: Queues shown by name.
        match: Glob patterns over queue names; matching queues are found by SCAN.
        allow_actions: Enable the POST actions (requeue, purge, clean, flush, job control,
            pausing and resuming groups).
        auth: ``(user, password)`` for HTTP basic auth, or None for none.
        refresh_secs: How often the page fetches new data.
        sample_secs: How often the server samples the counts for the charts.
        discover_secs: How often queues matching ``match`` are looked for again.
        allowed_hosts: The only ``Host`` header values (without port) answered, or None for
            any.
        loopback_only: Answer only requests whose ``Host`` header names a loopback address
            (127.0.0.0/8 or ::1, in any of their textual forms) or ``localhost``, with the port
            the request came in on. ``rwq dashboard`` sets it whenever it binds a loopback
            address, so that a web page whose domain was pointed at 127.0.0.1 (DNS rebinding)
            cannot read the dashboard or its CSRF token.

    Raises:
        InvalidArgumentError: An interval is out of its bounds (``refresh_secs``: 0.5 to 3600
            seconds, see :func:`~redis_work_queue.validation.check_refresh_secs`; the others
            finite and positive).
    """

    url: str
    queues: tuple[str, ...] = ()
    match: tuple[str, ...] = ()
    allow_actions: bool = False
    auth: tuple[str, str] | None = None
    refresh_secs: float = 2.0
    sample_secs: float = 2.0
    discover_secs: float = 10.0
    allowed_hosts: tuple[str, ...] | None = None
    loopback_only: bool = False

    def __post_init__(self) -> None:
        check_refresh_secs(self.refresh_secs)
        for name in ("sample_secs", "discover_secs"):
            value = getattr(self, name)
            if not _is_number(value) or not math.isfinite(value) or value <= 0:
                raise InvalidArgumentError(
                    f"{name} must be a finite number of seconds above 0, got {value!r}"
                )


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


@dataclass
class DashboardState:
    """What the running dashboard keeps between requests."""

    settings: DashboardSettings
    db: AsyncRedis
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    samples: data.Samples = field(default_factory=data.Samples)
    discovered: list[str] = field(default_factory=list)
    truncated: bool = False
    discovered_at: float | None = None
    down: bool = False

    async def queue_names(self, force: bool = False) -> list[str]:
        """The queues shown: those named, then those discovered (looked for again when due)."""
        settings = self.settings
        if settings.match:
            due = self.discovered_at is None or (
                data.now() - self.discovered_at >= settings.discover_secs
            )
            if force or due:
                self.discovered, self.truncated = await data.discover(self.db, settings.match)
                self.discovered_at = data.now()
        named = list(dict.fromkeys(settings.queues))
        return named + [n for n in self.discovered if n not in named]

    def known(self, name: str) -> bool:
        """Whether ``name`` is a queue the dashboard shows (actions only touch those)."""
        return name in self.settings.queues or name in self.discovered

    async def overview(self, history: str | None = None) -> dict[str, Any]:
        """Every queue's counts and rates; records a sample of each.

        Args:
            history: The queue whose samples to include (the one the page charts), if any.
        """
        names = await self.queue_names()
        at = data.now()
        rows = []
        for name in names:
            try:
                row = await data.queue_summary(self.db, name, at)
            except UNREACHABLE:
                raise
            except (WorkQueueError, redis.ResponseError) as err:
                # One queue that cannot be read (a key of another program, a refused command)
                # is one row saying why; the others are shown as usual.
                rows.append(await data.broken(self.db, name, err))
                continue
            self.samples.add(name, at, row, min_gap=self.settings.sample_secs / 2)
            row["rates"] = self.samples.rates(name)
            if name == history:
                row["history"] = self.samples.history(name)
            rows.append(row)
        self.samples.forget_except(names)
        return {"ok": True, "time": at, "queues": rows, "truncated": self.truncated}

    def went_down(self, err: BaseException) -> None:
        """Note that Redis is unreachable: logged once per outage."""
        if not self.down:
            self.down = True
            logger.warning("Redis unreachable at %s: %s", mask(self.settings.url), mask(str(err)))

    def came_back(self) -> None:
        """Note that Redis answers again."""
        if self.down:
            self.down = False
            logger.warning("Redis reachable again at %s", mask(self.settings.url))


def _state(request: Request) -> DashboardState:
    state: DashboardState = request.app.state.dashboard
    return state


def _json(body: dict[str, Any], status: int = 200) -> JSONResponse:
    return JSONResponse(body, status_code=status, headers={"Cache-Control": "no-store"})


async def _guarded(
    state: DashboardState, work: Callable[[], Awaitable[dict[str, Any] | Response]]
) -> Response:
    """Run ``work``; Redis being unreachable gives 503, another Redis or queue error 500.

    What ``work`` returns is the reply: a dict as JSON, a response as it is.
    """
    try:
        body = await work()
    except UNREACHABLE as err:
        state.went_down(err)
        return _json({"ok": False, "error": f"Redis is unreachable: {mask(str(err))}"}, 503)
    except (WorkQueueError, redis.RedisError) as err:
        logger.warning("dashboard request failed: %s", mask(str(err)))
        return _json({"ok": False, "error": mask(str(err))}, 500)
    state.came_back()
    return body if isinstance(body, Response) else _json(body)


async def _on_queue(
    state: DashboardState, name: str, work: Callable[[], Awaitable[dict[str, Any] | Response]]
) -> Response:
    """Run ``work`` on queue ``name`` as :func:`_guarded` does; 404 for a queue not shown."""

    async def shown() -> dict[str, Any] | Response:
        await state.queue_names()
        if not state.known(name):
            raise _NotShown(name)
        return await work()

    try:
        return await _guarded(state, shown)
    except _NotShown:
        return _json({"ok": False, "error": f"no queue {name!r} is shown here"}, 404)


async def page(request: Request) -> Response:
    """The dashboard page."""
    state = _state(request)
    templates: Jinja2Templates = request.app.state.templates
    return templates.TemplateResponse(
        request,
        "index.html",
        {
            "csrf": state.csrf,
            "allow_actions": state.settings.allow_actions,
            "refresh_ms": int(state.settings.refresh_secs * 1000),
        },
        headers={"Cache-Control": "no-store"},
    )


async def overview(request: Request) -> Response:
    """Every queue's counts (``WorkQueue.stats``), oldest waiting age and rates.

    With ``?history=<queue>``, that queue's samples too (the page charts one queue).
    """
    state = _state(request)
    charted = request.query_params.get("history")
    return await _guarded(state, lambda: state.overview(charted))


async def queue_detail(request: Request) -> Response:
    """One queue's waiting items, pending leases, dead letters and live workers.

    With ``&tab=waiting|leased|delayed|dead&page=N``, one page of that tab and the queue's
    counts instead (the console's view).
    """
    state = _state(request)
    name = request.query_params.get("name", "")
    tab = request.query_params.get("tab")
    if tab is not None and tab not in data.TABS:
        return _json({"ok": False, "error": f"no tab {tab!r}: one of {', '.join(data.TABS)}"}, 400)
    try:
        page_no = int(request.query_params.get("page", "1"))
    except ValueError:
        return _json({"ok": False, "error": "page must be a number (1 is the first)"}, 400)
    if not 1 <= page_no <= data.MAX_PAGE:
        return _json({"ok": False, "error": f"page must be 1 to {data.MAX_PAGE}"}, 400)

    async def work() -> dict[str, Any]:
        try:
            if tab is not None:
                return {"ok": True, **(await data.queue_tab(state.db, name, tab, page_no))}
            return {"ok": True, **(await data.queue_detail(state.db, name))}
        except UNREACHABLE:
            raise
        except (WorkQueueError, redis.ResponseError) as err:
            return {"ok": True, **(await data.broken(state.db, name, err))}

    return await _on_queue(state, name, work)


async def job_detail(request: Request) -> Response:
    """One job's page: ``?name=<queue>&id=<id>`` (bounded reads; see ``data.job_detail``)."""
    state = _state(request)
    name = request.query_params.get("name", "")
    item_id = request.query_params.get("id")
    if not item_id:
        return _json({"ok": False, "error": "name the job: ?name=QUEUE&id=ID"}, 400)

    async def work() -> dict[str, Any]:
        return {"ok": True, **(await data.job_detail(state.db, name, item_id))}

    return await _on_queue(state, name, work)


async def live(request: Request) -> Response:
    """The live feed of one queue: ``?name=<queue>&since=<event id or $>``.

    One bounded blocking read of the queue's event stream (see ``data.live_events``): the page
    redraws when events come; ``live`` false (a queue made without events) tells it to poll.
    """
    state = _state(request)
    name = request.query_params.get("name", "")
    since = request.query_params.get("since", "$")
    if since != "$" and not data.EVENT_ID.fullmatch(since):
        return _json({"ok": False, "error": "since must be an event id or $"}, 400)

    async def work() -> dict[str, Any]:
        return {"ok": True, **(await data.live_events(state.db, name, since))}

    return await _on_queue(state, name, work)


async def workers(request: Request) -> Response:
    """The live workers of every queue shown, each once."""
    state = _state(request)

    async def work() -> dict[str, Any]:
        names = await state.queue_names()
        return {
            "ok": True,
            "time": data.now(),
            "workers": await data.workers_everywhere(state.db, names),
            "durations": await data.queue_durations(state.db, names),
        }

    return await _guarded(state, work)


async def item_data(request: Request) -> Response:
    """One item's whole data, as a download (the one read of a whole value the page makes).

    ``?name=<queue>&id=<id>``, with ``&dead=1`` for a dead letter's data.
    """
    state = _state(request)
    name = request.query_params.get("name", "")
    item_id = request.query_params.get("id")
    dead = request.query_params.get("dead", "") in ("1", "true", "yes")
    if item_id is None:
        return _json({"ok": False, "error": "name the item: ?name=QUEUE&id=ID"}, 400)

    async def work() -> Response:
        found = await AsyncWorkQueue(KeyPrefix(name)).item_data(state.db, item_id, dead)
        if found is None:
            what = "dead letter" if dead else "item"
            return _json({"ok": False, "error": f"no {what} {item_id!r} in {name}"}, 404)
        return Response(
            found,
            media_type="application/octet-stream",
            headers={
                "Content-Disposition": f'attachment; filename="{download_name(item_id)}"',
                "Cache-Control": "no-store",
            },
        )

    return await _on_queue(state, name, work)


def download_name(item_id: str) -> str:
    """A file name for an item's data: its id with anything but ``[A-Za-z0-9._-]`` as ``_``."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", item_id)[:100].strip(".") or "item"
    return f"{safe}.bin"


class _NotShown(Exception):
    """A request named a queue the dashboard does not show."""


def _ids(body: dict[str, Any]) -> list[str] | None:
    """The ids an action names (None for all); raises ValueError on a malformed body."""
    if body.get("all") is True:
        return None
    ids = body.get("ids")
    if not isinstance(ids, list) or not ids or not all(isinstance(i, str) for i in ids):
        raise ValueError('name the dead letters in "ids" (a list of strings) or pass "all": true')
    return ids


class _Refused(Exception):
    """An action request refused before anything is done."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


async def _checked_action(
    request: Request, state: DashboardState
) -> tuple[str, str, list[str] | None]:
    """The queue, action and ids (or group) of an action request, once every check passed.

    Raises:
        _Refused: Actions are disabled, the CSRF token is missing or wrong, or the body is
            malformed (flush: the queue's name not typed).
    """
    if not state.settings.allow_actions:
        raise _Refused(403, "actions are disabled: start the dashboard with --allow-actions")
    token = request.headers.get(CSRF_HEADER, "")
    if not token or not secrets.compare_digest(token.encode(), state.csrf.encode()):
        raise _Refused(403, "missing or wrong CSRF token: reload the page")
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
        raise _Refused(415, "send the action as application/json")
    try:
        body = await request.json()
    except ValueError as err:
        raise _Refused(400, "the body is not JSON") from err
    if not isinstance(body, dict):
        raise _Refused(400, "the body must be a JSON object")
    name, kind = body.get("queue"), body.get("action")
    if kind not in ACTIONS:
        raise _Refused(400, f"unknown action {kind!r}: one of {', '.join(ACTIONS)}")
    if not isinstance(name, str):
        raise _Refused(400, '"queue" must name a queue')
    ids: list[str] | None = None
    if kind in ("requeue", "purge"):
        try:
            ids = _ids(body)
        except ValueError as err:
            raise _Refused(400, str(err)) from err
    if kind == "flush" and body.get("confirm") != name:
        raise _Refused(400, f"type the queue's name ({name}) to confirm the flush")
    if kind in JOB_ACTIONS:
        # One job, by id (job control's operations).
        if not isinstance(body.get("id"), str) or not body["id"]:
            raise _Refused(400, f'name the job to {kind} in "id" (a string)')
        ids = [body["id"]]
    if kind in GROUP_ACTIONS:
        # One group, by name (fair groups): checked as the library checks a group's name.
        try:
            ids = [check_group(body.get("group"), '"group"')]
        except InvalidArgumentError as err:
            raise _Refused(400, str(err)) from err
    if kind in ("requeue", "purge") and ids is None and body.get("confirm") != name:
        raise _Refused(
            400, f"type the queue's name ({name}) to confirm {kind} of every dead letter"
        )
    return name, kind, ids


async def action(request: Request) -> Response:
    """Run one action on one queue: only with actions enabled and the page's CSRF token."""
    state = _state(request)
    try:
        name, kind, ids = await _checked_action(request, state)
    except _Refused as err:
        return _json({"ok": False, "error": str(err)}, err.status)

    async def work() -> dict[str, Any]:
        queue = await data.acting_queue(state.db, name)
        if kind == "requeue":
            message = f"requeued {plural(await queue.requeue_dead(state.db, ids), 'dead letter')}"
        elif kind == "purge":
            message = f"purged {plural(await queue.purge_dead(state.db, ids), 'dead letter')}"
        elif kind in JOB_ACTIONS:
            assert ids is not None  # checked: one job's id
            message = await _job_action(queue, state.db, kind, ids[0])
        elif kind in GROUP_ACTIONS:
            assert ids is not None  # checked: one group's name
            message = await _group_action(queue, state.db, kind, ids[0])
        elif kind == "light-clean":
            message = _clean_message(await queue.light_clean(state.db))
        elif kind == "deep-clean":
            message = _clean_message(await queue.deep_clean(state.db))
        else:
            report = await queue.flush(state.db)
            message = f"deleted {report.keys} keys ({report.items} items)"
            await state.queue_names(force=True)
        logger.warning("dashboard action %s on %s: %s", kind, name, message)
        return {"ok": True, "message": f"{name}: {message}"}

    return await _on_queue(state, name, work)


async def _job_action(queue: AsyncWorkQueue, db: AsyncRedis, kind: str, item_id: str) -> str:
    """Run job control's ``cancel``, ``promote`` or ``retry`` on one job; what it did."""
    if kind == "cancel":
        done = await queue.cancel(db, item_id)
        if done == Cancelled.SIGNALLED:
            return f"cancelled {item_id} (its worker is told at its next renewal)"
        return f"cancelled {item_id}" if done else f"{item_id}: nothing to cancel"
    if kind == "promote":
        if await queue.promote(db, item_id):
            return f"promoted {item_id}: it is the next to be leased"
        return f"{item_id} is not delayed"
    if await queue.retry(db, item_id):
        return f"{item_id} is queued again"
    return f"{item_id} is not a dead letter (or its id is in use again)"


async def _group_action(queue: AsyncWorkQueue, db: AsyncRedis, kind: str, group: str) -> str:
    """Pause or resume one group of a queue; what it did."""
    if kind == "pause-group":
        if await queue.pause_group(db, group):
            return f"paused group {group} (its items wait; those in flight finish)"
        return f"group {group} was paused already"
    if await queue.resume_group(db, group):
        return f"resumed group {group}"
    return f"group {group} was not paused"


def _clean_message(report: Any) -> str:
    counts = asdict(report)
    return ", ".join(f"{k} {v}" for k, v in counts.items())


async def _sample_forever(state: DashboardState, stop: asyncio.Event) -> None:
    """Sample every queue's counts for the charts, also when no page is open, until ``stop``.

    The task is also cancelled when the dashboard stops, but a cancellation that arrives as a
    read times out can come out of redis-py as a timeout, which the loop would take for an
    outage: ``stop`` ends it then.
    """
    delay = state.settings.sample_secs
    while not stop.is_set():
        try:
            await state.overview()
        except UNREACHABLE as err:
            state.went_down(err)
            delay = min(delay * 2, MAX_SAMPLE_BACKOFF)
        except (WorkQueueError, redis.RedisError) as err:
            logger.warning("dashboard sampling failed: %s", err)
            delay = min(delay * 2, MAX_SAMPLE_BACKOFF)
        else:
            state.came_back()
            delay = state.settings.sample_secs
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), delay)


class BasicAuth:
    """ASGI middleware refusing every request without the right HTTP basic credentials.

    Args:
        app: The application behind it.
        user: The user name.
        password: The password (compared in constant time; never logged).
    """

    def __init__(self, app: ASGIApp, user: str, password: str) -> None:
        self.app = app
        self.expected = base64.b64encode(f"{user}:{password}".encode()).decode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on when its credentials are right; else answer 401."""
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or ())
            given = headers.get(b"authorization", b"").decode("latin-1")
            scheme, _, credentials = given.partition(" ")
            if scheme.lower() != "basic" or not secrets.compare_digest(
                credentials.strip().encode(), self.expected.encode()
            ):
                response = PlainTextResponse(
                    "authentication required",
                    status_code=401,
                    headers={"WWW-Authenticate": 'Basic realm="rwq dashboard", charset="UTF-8"'},
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


class SecurityHeaders:
    """ASGI middleware adding headers that keep the page self-contained and unframed."""

    HEADERS = (
        (
            b"content-security-policy",
            b"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
            b"connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
        ),
        (b"x-content-type-options", b"nosniff"),
        (b"referrer-policy", b"no-referrer"),
        (b"x-frame-options", b"DENY"),
    )

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Add the headers to every HTTP response."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *self.HEADERS]
            await send(message)

        await self.app(scope, receive, send_with_headers)


def is_loopback(host: str) -> bool:
    """Whether ``host`` names a loopback address.

    That is ``localhost``, an address of 127.0.0.0/8 in any form the system accepts
    (``127.0.0.2``, ``127.1``, ``2130706433``...) or ``::1`` (with or without brackets, or as an
    IPv4-mapped address).
    """
    bare = host.strip()
    if bare.startswith("[") and bare.endswith("]"):
        bare = bare[1:-1]
    if bare.lower() == "localhost":
        return True
    try:
        address = ipaddress.ip_address(bare.split("%", 1)[0])
    except ValueError:
        # The shorter IPv4 forms the C library takes (127.1, 0x7f000001...), and only those.
        if not re.fullmatch(r"[0-9A-Fa-fXx.]+", bare):
            return False
        try:
            packed = socket.inet_aton(bare)
        except OSError:
            return False
        return packed[0] == 127
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def split_host_header(value: str) -> tuple[str, int | None] | None:
    """A ``Host`` header as (host, port or None); None when it is not one."""
    if value.startswith("["):
        host, bracket, rest = value[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            return None
        port = rest[1:] if rest else None
    else:
        host, colon, port_text = value.rpartition(":")
        if not colon:
            host, port_text = value, ""
        port = port_text if colon else None
    if not host or (port is not None and not (port.isdigit() and len(port) <= 5)):
        return None
    return host, None if port is None else int(port)


class LoopbackHostCheck:
    """ASGI middleware refusing (400) a request whose ``Host`` header names another host.

    Only a loopback address or ``localhost``, with the port the request came in on, is
    answered: a DNS-rebinding guard.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    def allowed(self, scope: Scope) -> bool:
        """Whether the request's Host header names loopback, and the server's port."""
        headers = dict(scope.get("headers") or ())
        split = split_host_header(headers.get(b"host", b"").decode("latin-1"))
        if split is None:
            return False
        host, port = split
        server = scope.get("server")
        listening = server[1] if server and len(server) > 1 else None
        default = 443 if scope.get("scheme") in ("https", "wss") else 80
        return is_loopback(host) and (listening is None or (port or default) == listening)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on when its Host header is allowed; else answer 400."""
        if scope["type"] in ("http", "websocket") and not self.allowed(scope):
            response = PlainTextResponse("Invalid host header", status_code=400)
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


def create_app(settings: DashboardSettings, db: AsyncRedis | None = None) -> ASGIApp:
    """Build the dashboard's ASGI application.

    Args:
        settings: How it runs.
        db: A ``redis.asyncio`` client to use; by default one is made from ``settings.url``
            (short timeouts, so a request during an outage fails fast).

    Returns:
        The application, with basic auth in front when ``settings.auth`` is set, and the
        loopback Host check in front of all when ``settings.loopback_only`` is.
    """
    client = db or AsyncRedis.from_url(
        settings.url, socket_connect_timeout=2, socket_timeout=5, health_check_interval=10
    )
    state = DashboardState(settings, client)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        stop = asyncio.Event()
        sampler = asyncio.create_task(_sample_forever(state, stop))
        try:
            yield
        finally:
            stop.set()
            sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sampler
            if db is None:
                await client.aclose()

    app = Starlette(
        routes=[
            Route("/", page),
            Route("/api/overview", overview),
            Route("/api/queue", queue_detail),
            Route("/api/data", item_data),
            Route("/api/job", job_detail),
            Route("/api/live", live),
            Route("/api/workers", workers),
            Route("/api/action", action, methods=["POST"]),
            Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
        ],
        lifespan=lifespan,
    )
    app.state.dashboard = state
    app.state.templates = Jinja2Templates(directory=HERE / "templates")
    wrapped: ASGIApp = SecurityHeaders(app)
    if settings.allowed_hosts is not None:
        wrapped = TrustedHostMiddleware(wrapped, allowed_hosts=list(settings.allowed_hosts))
    if settings.auth is not None:
        wrapped = BasicAuth(wrapped, *settings.auth)
    if settings.loopback_only:
        wrapped = LoopbackHostCheck(wrapped)  # first: a rebound name learns nothing, not even 401
    return wrapped
