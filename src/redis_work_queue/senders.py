"""How calls reach one client: redis-py's public command layer, the path every client can take.

A :class:`Sender` sends the calls of :mod:`.calls` on a client given to each of its methods:
scripts (EVALSHA, then EVAL when the server does not have the script), plain commands,
pipelines of independent scripts, and a script followed by WAIT on one connection. The lean
path (:mod:`.lean`) and Redis Cluster's routing (:mod:`.routing`) are senders of the same
interface; :mod:`.transport` chooses one per client. A sender keeps no reference to its client.

Writes that wait for replicas are sent once: redis-py re-sends a command whose reply was lost
(its ``retry`` and ``retry_on_timeout`` settings, and a pipeline's retry), which for a write
that waits for replicas would run the script a second time (an ``add_item`` would then return
False for the item it added). So the script and its WAIT take a connection from the client's
pool, go out in one round trip, and both replies are read. A connection lost once the script was
sent raises :class:`~redis_work_queue.errors.OutcomeUnknownError`; it is never re-sent.
Connecting (before anything is sent) is left to the connection, with its own retry. The script
is loaded (SCRIPT LOAD) before its first such use, then sent as EVALSHA; when the server answers
NOSCRIPT all the same (the script did not run), it is sent again as EVAL.

Where the server has Redis Functions (Redis 7 and later), the package's scripts are called as
the functions of its library (:mod:`.functions`) with FCALL: a server without the library
answers that the function does not exist (it did not run), and the library is loaded (FUNCTION
LOAD) and the call sent again. A server or user that refuses FUNCTION or FCALL (Redis 6, an
emulation, an ACL) makes the sender call scripts from then on (see :attr:`Sender.functions`).
Pipelines (of the package or a caller's) always carry scripts.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterator
from typing import Any

from redis import exceptions as rex
from redis.client import NEVER_DECODE
from redis.exceptions import NoScriptError, ResponseError

from . import functions
from .calls import Ask, Command, Pipelined, ScriptCall, adrive, drive
from .clients import max_block
from .errors import InvalidArgumentError, OutcomeUnknownError, ScriptError
from .scripts import Arg, translate_error

logger = logging.getLogger("redis_work_queue.server")

#: The environment variable that sets the default of :attr:`Sender.mode` for every client of
#: the process (and the worker processes it starts): ``auto``, ``always`` or ``never``.
FUNCTIONS_ENV = "RWQ_FUNCTIONS"
FUNCTION_MODES = ("auto", "always", "never")


def default_mode() -> str:
    """The functions mode of a new client: :data:`FUNCTIONS_ENV`, else ``auto``.

    Raises:
        InvalidArgumentError: The variable holds something else than a mode.
    """
    mode = os.environ.get(FUNCTIONS_ENV, "auto").strip().lower() or "auto"
    if mode not in FUNCTION_MODES:
        raise InvalidArgumentError(
            f"{FUNCTIONS_ENV} must be 'auto', 'always' or 'never', not {mode!r}"
        )
    return mode


#: Added to the WAIT timeout when reading its reply, so that a client whose socket timeout is
#: shorter than the replica timeout still gets WAIT's answer rather than a lost reply.
WAIT_MARGIN_SECS = 1.0

_LOST = (rex.ConnectionError, rex.TimeoutError, OSError)
#: An exchange on one connection, as steps ``(method name, *args[, keyword dict])``.
_Exchange = Generator[tuple[Any, ...], Any, tuple[Any, int]]


class Sender:
    """Sends calls on a client through redis-py's public command layer.

    Replies are never decoded by the client, so item data stays binary even on a connection
    with ``decode_responses=True``. Errors a script raises come out as the library's
    (:func:`~.scripts.translate_error`).
    """

    __slots__ = ("checked", "functions", "loaded", "mode", "warned")

    def __init__(self, mode: str | None = None) -> None:
        #: The scripts this sender has loaded (SCRIPT LOAD) for its writes that wait.
        self.loaded: set[str] = set()
        #: Whether the server's eviction policy was read for this client (on its first script
        #: call), and whether a warning about it was logged.
        self.checked = False
        self.warned = False
        #: ``auto``: call functions where the server takes them, else scripts; ``always``:
        #: functions only (a server that refuses them raises :class:`ScriptError`); ``never``:
        #: scripts only.
        self.mode = default_mode() if mode is None else mode
        #: Whether calls go as functions: None until the server has answered (``auto``).
        self.functions: bool | None = False if self.mode == "never" else None

    # Scripts and commands ----------------------------------------------------------------------

    def script(self, db: Any, call: ScriptCall) -> Any:
        """Run a script (FCALL, else EVALSHA, else EVAL) and return its reply, undecoded."""
        params = call.script.params(call.keys, call.args)
        if self.functions is not False and call.script.packaged:
            name = functions.library().function(call.script.name)
            return self.by_function(
                db, call, params, lambda: self.send_raw(db, "FCALL", name, *params)
            )
        return self.evalsha(db, call, params)

    def by_function(
        self, db: Any, call: ScriptCall, params: list[Arg], fcall: Callable[[], Any]
    ) -> Any:
        """Run a call as a function: ``fcall()`` sends its FCALL.

        A server without the library gets it (:meth:`load`) and the call is sent again; where
        the function did not run and cannot, the call goes as a script.
        """
        try:
            reply = fcall()
        except ResponseError as err:
            if self.function_error(err) != "load" or not self.load(db):
                return self.evalsha(db, call, params)  # the function did not run
            try:
                reply = fcall()
            except ResponseError as again:
                if functions.missing(again):  # flushed again at once: a script this time
                    return self.evalsha(db, call, params)
                raise translate_error(again) from again
        self.functions = True
        return reply

    def evalsha(self, db: Any, call: ScriptCall, params: list[Arg]) -> Any:
        """Run a call as a script: EVALSHA, else EVAL."""
        try:
            return self.send(db, "EVALSHA", call.script.sha, *params)
        except NoScriptError:
            return self.send(db, "EVAL", call.script.script, *params)

    async def ascript(self, db: Any, call: ScriptCall) -> Any:
        """Asynchronous :meth:`script`, on a ``redis.asyncio`` client."""
        params = call.script.params(call.keys, call.args)
        if self.functions is not False and call.script.packaged:
            name = functions.library().function(call.script.name)
            return await self.aby_function(
                db, call, params, lambda: self.asend_raw(db, "FCALL", name, *params)
            )
        return await self.aevalsha(db, call, params)

    async def aby_function(
        self,
        db: Any,
        call: ScriptCall,
        params: list[Arg],
        fcall: Callable[[], Awaitable[Any]],
    ) -> Any:
        """Asynchronous :meth:`by_function`."""
        try:
            reply = await fcall()
        except ResponseError as err:
            if self.function_error(err) != "load" or not await self.aload(db):
                return await self.aevalsha(db, call, params)
            try:
                reply = await fcall()
            except ResponseError as again:
                if functions.missing(again):
                    return await self.aevalsha(db, call, params)
                raise translate_error(again) from again
        self.functions = True
        return reply

    async def aevalsha(self, db: Any, call: ScriptCall, params: list[Arg]) -> Any:
        """Asynchronous :meth:`evalsha`."""
        try:
            return await self.asend(db, "EVALSHA", call.script.sha, *params)
        except NoScriptError:
            return await self.asend(db, "EVAL", call.script.script, *params)

    # Functions ---------------------------------------------------------------------------------

    def function_error(self, err: ResponseError) -> str:
        """What to do after FCALL's error ``err``.

        ``load`` the library (the function is not on the server), call the ``script`` this
        once (out of memory), or call ``scripts`` (the server refuses functions); else it
        raises the error as the library's (the function ran, or the server refused the call).

        Raises:
            ScriptError: Functions are refused while the mode is ``always``; or the error.
        """
        if functions.missing(err):
            return "load"
        if isinstance(err, rex.OutOfMemoryError) or str(err).startswith("OOM "):
            # Refused whole, before it ran; a script is refused at its first write only (see
            # the module's description), so the call goes as a script this time.
            return "script"
        if functions.refused(err) and self.functions is None:
            return self.refuse(err)
        raise translate_error(err) from err

    def refuse(self, err: BaseException) -> str:
        """The server refused functions: scripts from now on (or an error, in ``always``)."""
        if self.mode == "always":
            raise ScriptError(
                "Redis Functions are required (mode 'always': transport.use_functions or "
                f"{FUNCTIONS_ENV}) but the server refused them ({err}): load them with "
                "'rwq functions install', grant FUNCTION and FCALL, or use 'auto'"
            ) from err
        logger.info("the server refuses Redis Functions (%s): calling scripts", err)
        self.functions = False
        return "scripts"

    def load_error(self, err: ResponseError) -> bool:
        """After FUNCTION LOAD's error: whether to call the function all the same.

        True: it is there (loaded by another client). False: call the script this once (or
        from now on, when functions are refused).
        """
        if functions.already_loaded(err):
            return True
        text = str(err)
        if text.startswith("OOM ") or isinstance(err, rex.OutOfMemoryError):
            return False  # out of memory: the script this time (it is refused at a first write)
        if self.mode == "always" and not functions.refused(err):
            raise translate_error(err) from err
        self.refuse(err)
        return False

    def load(self, db: Any) -> bool:
        """Load the library on ``db``'s server; whether to call the function now."""
        try:
            self.send_raw(db, "FUNCTION", "LOAD", functions.library().text)
        except ResponseError as err:
            return self.load_error(err)
        logger.info("loaded the function library %s", functions.library().name)
        return True

    async def aload(self, db: Any) -> bool:
        """Asynchronous :meth:`load`."""
        try:
            await self.asend_raw(db, "FUNCTION", "LOAD", functions.library().text)
        except ResponseError as err:
            return self.load_error(err)
        logger.info("loaded the function library %s", functions.library().name)
        return True

    def command(self, db: Any, call: Command) -> Any:
        """Send a plain command and return its reply, undecoded."""
        return self.send(db, *call.args)

    async def acommand(self, db: Any, call: Command) -> Any:
        """Asynchronous :meth:`command`."""
        return await self.asend(db, *call.args)

    @staticmethod
    def send_raw(db: Any, *args: Arg) -> Any:
        """One command whose reply is not decoded; a server error as redis-py raises it."""
        return db.execute_command(*args, **{NEVER_DECODE: True})

    @staticmethod
    async def asend_raw(db: Any, *args: Arg) -> Any:
        """Asynchronous :meth:`send_raw`."""
        return await db.execute_command(*args, **{NEVER_DECODE: True})

    @staticmethod
    def send(db: Any, *args: Arg, **options: Any) -> Any:
        """One command whose reply is not decoded; a server error as the library's.

        Raises:
            WrongKeyTypeError: A key holds the wrong Redis type.
            redis.exceptions.OutOfMemoryError: The server refused a write for lack of memory.
            redis.exceptions.NoScriptError: EVALSHA of a script the server does not have.
        """
        try:
            return db.execute_command(*args, **options, **{NEVER_DECODE: True})
        except NoScriptError:
            raise
        except ResponseError as err:
            raise translate_error(err) from err

    @staticmethod
    async def asend(db: Any, *args: Arg, **options: Any) -> Any:
        """Asynchronous :meth:`send`."""
        try:
            return await db.execute_command(*args, **options, **{NEVER_DECODE: True})
        except NoScriptError:
            raise
        except ResponseError as err:
            raise translate_error(err) from err

    # Pipelines -------------------------------------------------------------------------------

    def check(self, db: Any, call: ScriptCall) -> None:
        """Check a call before it is sent (Redis Cluster: that its keys share a slot)."""

    def route(self, db: Any, call: ScriptCall) -> dict[str, Any]:
        """The options that send a call of a synchronous pipeline to its server (none here)."""
        return {}

    def pipelined(self, db: Any, call: Pipelined) -> Any:
        """Independent scripts in one round trip (not a transaction); their replies."""
        pipe = db.pipeline(transaction=False)
        for each in call.calls:
            self.check(db, each)
            queue_on(pipe, each, **self.route(db, each))
        try:
            return pipe.execute()
        except ResponseError as err:  # a wrong type: the library's error, as for one call
            raise translate_error(err) from err

    async def apipelined(self, db: Any, call: Pipelined) -> Any:
        """Asynchronous :meth:`pipelined`."""
        pipe = db.pipeline(transaction=False)
        for each in call.calls:
            self.check(db, each)
            queue_on(pipe, each)
        try:
            return await pipe.execute()
        except ResponseError as err:
            raise translate_error(err) from err

    # Writes that wait for replicas -----------------------------------------------------------

    def script_and_wait(self, db: Any, call: ScriptCall) -> tuple[Any, int]:
        """Run a script then ``WAIT`` on one connection of ``db``, sent once.

        Returns:
            The script's reply (undecoded) and the number of replicas that acknowledged.

        Raises:
            OutcomeUnknownError: The connection was lost after the script was sent.
            ResponseError: The server refused the script (such as MOVED): it did not run.
        """
        if self.functions is not False and call.script.packaged:
            library = functions.library()
            if library.name not in self.loaded:  # as a script is: loaded before its first use
                if not self.load(db):
                    return self.scripts_and_wait(db, call)
                self.loaded.add(library.name)
            name = library.function(call.script.name)
            try:
                done = _waited(db, call, by_sha=True, function=name)
            except ResponseError as err:
                if not self.waited_function_error(err) or not self.load(db):
                    return self.scripts_and_wait(db, call)
                try:
                    done = _waited(db, call, by_sha=True, function=name)
                except ResponseError as again:
                    if not functions.missing(again):
                        raise
                    return self.scripts_and_wait(db, call)
            self.functions = True
            return done
        return self.scripts_and_wait(db, call)

    def waited_function_error(self, err: ResponseError) -> bool:
        """After the error of a function followed by WAIT: whether to load and send again.

        True: load the library and send again; False: send the script; else the error is
        raised as it is (it may be a MOVED that the cluster's routing follows).
        """
        if functions.missing(err):
            return True
        if isinstance(err, rex.OutOfMemoryError) or str(err).startswith("OOM "):
            return False
        if functions.refused(err) and self.functions is None:
            self.refuse(err)
            return False
        raise err

    def scripts_and_wait(self, db: Any, call: ScriptCall) -> tuple[Any, int]:
        """:meth:`script_and_wait` with the script: EVALSHA, else EVAL."""
        if call.script.sha not in self.loaded:
            db.script_load(call.script.script)  # a plain command: running it twice is harmless
            self.loaded.add(call.script.sha)
        try:
            return _waited(db, call, by_sha=True)
        except NoScriptError:  # the server lost its scripts (a restart, a failover, SCRIPT FLUSH)
            self.loaded.discard(call.script.sha)
            return _waited(db, call, by_sha=False)

    async def ascript_and_wait(self, db: Any, call: ScriptCall) -> tuple[Any, int]:
        """Asynchronous :meth:`script_and_wait`."""
        if self.functions is not False and call.script.packaged:
            library = functions.library()
            if library.name not in self.loaded:
                if not await self.aload(db):
                    return await self.ascripts_and_wait(db, call)
                self.loaded.add(library.name)
            name = library.function(call.script.name)
            try:
                done = await _awaited(db, call, by_sha=True, function=name)
            except ResponseError as err:
                if not self.waited_function_error(err) or not await self.aload(db):
                    return await self.ascripts_and_wait(db, call)
                try:
                    done = await _awaited(db, call, by_sha=True, function=name)
                except ResponseError as again:
                    if not functions.missing(again):
                        raise
                    return await self.ascripts_and_wait(db, call)
            self.functions = True
            return done
        return await self.ascripts_and_wait(db, call)

    async def ascripts_and_wait(self, db: Any, call: ScriptCall) -> tuple[Any, int]:
        """Asynchronous :meth:`scripts_and_wait`."""
        if call.script.sha not in self.loaded:
            await db.script_load(call.script.script)
            self.loaded.add(call.script.sha)
        try:
            return await _awaited(db, call, by_sha=True)
        except NoScriptError:
            self.loaded.discard(call.script.sha)
            return await _awaited(db, call, by_sha=False)

    # Questions about the client --------------------------------------------------------------

    def answer(self, db: Any, ask: Ask) -> Any:
        """The answer to an operation's question about ``db`` (see :data:`~.calls.Fact`)."""
        if ask.fact == "max_block":
            return max_block(db)
        return ask.fact == "together"  # one server: every key can be named in one call

    async def aanswer(self, db: Any, ask: Ask) -> Any:
        """Asynchronous :meth:`answer`."""
        return self.answer(db, ask)


def raw_command(db: Any, *args: Arg, **options: Any) -> Any:
    """One command on a client or a caller's pipeline, by the public path; its reply undecoded.

    Raises:
        WrongKeyTypeError: A key holds the wrong Redis type.
        redis.exceptions.OutOfMemoryError: The server refused a write for lack of memory.
    """
    return Sender.send(db, *args, **options)


def queue_on(pipeline: Any, call: ScriptCall, **options: Any) -> None:
    """Queue a script call on a pipeline (sync or asyncio); it is loaded before it runs.

    A cluster pipeline cannot load scripts ahead, so it gets the source (EVAL). ``options``
    go with the command (``target_nodes`` on a cluster pipeline).
    """
    params = call.script.params(call.keys, call.args)
    if hasattr(pipeline, "scripts"):
        pipeline.scripts.add(call.script)
        pipeline.execute_command(
            "EVALSHA", call.script.sha, *params, **options, **{NEVER_DECODE: True}
        )
    else:
        pipeline.execute_command(
            "EVAL", call.script.script, *params, **options, **{NEVER_DECODE: True}
        )


# The exchange of a write that waits --------------------------------------------------------------


def _waited(
    db: Any, call: ScriptCall, by_sha: bool, function: str | None = None
) -> tuple[Any, int]:
    with _borrowed(db) as conn:
        return drive(_exchange(conn, call, by_sha, function), _performer(conn))


async def _awaited(
    db: Any, call: ScriptCall, by_sha: bool, function: str | None = None
) -> tuple[Any, int]:
    async with _aborrowed(db) as conn:
        return await adrive(_exchange(conn, call, by_sha, function), _performer(conn))


def _exchange(conn: Any, call: ScriptCall, by_sha: bool, function: str | None) -> _Exchange:
    """The script and its WAIT on one connection, as steps of the connection's methods.

    Each step is ``(method name, *args)`` or ``(method name, *args, keyword dict)``; an error of
    a step is thrown back in.
    """
    assert call.wait is not None
    yield ("connect",)  # connecting sends nothing: the connection's own retry applies
    params = call.script.params(call.keys, call.args)
    head: tuple[Arg, ...]
    if function is not None:
        head = ("FCALL", function)
    else:
        head = ("EVALSHA", call.script.sha) if by_sha else ("EVAL", call.script.script)
    first: BaseException | None = None
    reply: Any = None
    try:
        yield ("send_packed_command", conn.pack_commands([(*head, *params), ("WAIT", *call.wait)]))
        try:
            reply = yield ("read_response", {"disable_decoding": True})
        except ResponseError as err:
            first = err
        try:
            acked = yield ("read_response", _wait_read_options(conn, call.wait))
        except ResponseError as err:  # WAIT refused (a replica): the script's error comes first
            acked = err
    except _LOST as err:
        yield ("disconnect",)
        if isinstance(first, ResponseError):  # the script was refused: it wrote nothing
            raise
        raise OutcomeUnknownError(call.script.name, err) from err
    except BaseException:
        yield ("disconnect",)
        raise
    if first is not None:
        raise first
    if isinstance(acked, ResponseError):
        raise acked
    return reply, int(acked)


def _performer(conn: Any) -> Callable[[tuple[Any, ...]], Any]:
    """How a driver performs a step on ``conn``: ``(method name, *args[, keyword dict])``."""

    def perform(step: tuple[Any, ...]) -> Any:
        name, *rest = step
        if rest and isinstance(rest[-1], dict):
            return getattr(conn, name)(*rest[:-1], **rest[-1])
        return getattr(conn, name)(*rest)

    return perform


_TAKES_TIMEOUT: dict[type, bool] = {}


def _wait_read_options(conn: Any, wait: tuple[int, int]) -> dict[str, Any]:
    """The read options for WAIT's reply: long enough for WAIT to answer by itself."""
    socket_timeout = getattr(conn, "socket_timeout", None)
    kind = type(conn)
    takes = _TAKES_TIMEOUT.get(kind)
    if takes is None:  # newer redis-py: read_response takes a timeout
        takes = _TAKES_TIMEOUT[kind] = "timeout" in inspect.signature(conn.read_response).parameters
    if socket_timeout is None or not takes:
        return {}
    return {"timeout": max(float(socket_timeout), wait[1] / 1000 + WAIT_MARGIN_SECS)}


_NEEDS_NAME: dict[type, tuple[str, ...]] = {}


def name_args(pool: Any) -> tuple[str, ...]:
    """``get_connection``'s arguments: a command name where it is required (redis-py 5.0)."""
    kind = type(pool)
    found = _NEEDS_NAME.get(kind)
    if found is None:
        name = inspect.signature(pool.get_connection).parameters.get("command_name")
        needed = name is not None and name.default is inspect.Parameter.empty
        found = _NEEDS_NAME[kind] = ("EVALSHA",) if needed else ()
    return found


@contextlib.contextmanager
def _borrowed(db: Any) -> Iterator[Any]:
    """A connection of the client's pool, held for the ``with`` block."""
    pool = db.connection_pool
    conn = pool.get_connection(*name_args(pool))
    try:
        yield conn
    finally:
        pool.release(conn)


@contextlib.asynccontextmanager
async def _aborrowed(db: Any) -> AsyncIterator[Any]:
    """Asynchronous :func:`_borrowed`, for a ``redis.asyncio`` client."""
    pool = db.connection_pool
    conn = await pool.get_connection(*name_args(pool))
    try:
        yield conn
    finally:
        await pool.release(conn)


__all__ = ["WAIT_MARGIN_SECS", "Sender", "name_args", "queue_on", "raw_command"]
