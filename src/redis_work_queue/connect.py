"""Connections for the command line: a single server, Redis Cluster or Sentinel, from options.

URL forms: ``redis://`` and ``rediss://`` (TLS) for one server (or, with ``cluster``, any node of
a cluster); ``redis+cluster://`` / ``rediss+cluster://`` for a cluster;
``redis+sentinel://[[user]:password@]host:port[,host:port...]/MASTER[/DB]`` (or
``rediss+sentinel://``: TLS to the primary) for Sentinel, where the password is the primary's.
A password missing from the URL is taken from ``REDIS_PASSWORD``. The CA that signed a TLS
server's certificate (when the system's do not) is the ``tls_ca_cert`` option or an
``ssl_ca_certs=PATH`` query in a ``rediss://`` URL. Passwords are never shown:
:func:`mask` hides them in every message.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import SplitResult, parse_qs, quote, unquote, urlencode, urlsplit, urlunsplit

import redis
from redis.cluster import RedisCluster
from redis.exceptions import RedisClusterException
from redis.sentinel import Sentinel

from .errors import InvalidArgumentError

PASSWORD_ENV = "REDIS_PASSWORD"
#: A URL in a text: its scheme (any case) and everything up to the next white space.
_URL = re.compile(r"(?i)\b(?P<scheme>[a-z][a-z0-9+.-]*://)(?P<rest>\S*)")
#: A query parameter that carries a password (``password=``, ``sentinel_password=``...): its
#: value runs to the next ``&`` or ``#``.
_QUERY_PASSWORD = re.compile(r"(?i)(?P<name>[?&][^=&#]*password[^=&#]*=)(?P<value>[^&#]*)")
#: Characters that may close the text around a URL (a quote, a bracket, a comma): kept.
_CLOSERS = "'\",;)]}>"
HIDDEN = "***"


def mask(text: str) -> str:
    """``text`` with the password of every URL in it replaced by ``***``.

    The one function every message, log line and repr of the package passes a URL through.
    It hides the user information of each URL up to its last ``@`` (keeping a user name
    before a ``:``), so that a password holding a raw ``@``, ``:`` or ``/`` is hidden whole,
    and the value of every query parameter whose name holds ``password``. URLs are found by
    their scheme in any case (``redis``, ``rediss``, ``unix``, ``redis+sentinel``...) and end
    at white space; a password with white space in it must be percent-encoded.

    Args:
        text: Any text: a URL, a message, a repr; several URLs are each masked.

    Returns:
        The text with the passwords replaced; unchanged when it holds none.
    """
    return _URL.sub(_mask_url, text)


def _mask_url(found: re.Match[str]) -> str:
    rest = _QUERY_PASSWORD.sub(_mask_query_value, found["rest"])
    userinfo, at, after = rest.rpartition("@")
    if at:
        user, colon, _ = userinfo.partition(":")
        shown = f"{user}:" if colon and not any(c in user for c in "/?#") else ""
        rest = f"{shown}{HIDDEN}@{after}"
    return found["scheme"] + rest


def _mask_query_value(found: re.Match[str]) -> str:
    value = found["value"]
    kept = len(value) - len(value.rstrip(_CLOSERS))
    return found["name"] + (HIDDEN if value else "") + (value[-kept:] if kept else "")


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (an IPv6 host in brackets) as a pair.

    Raises:
        InvalidArgumentError: The text is not HOST:PORT with a port number.
    """
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise InvalidArgumentError(
            f"a sentinel is HOST:PORT (such as 127.0.0.1:26379), not {text!r}"
        )
    return host.strip("[]"), int(port)


@dataclass(frozen=True, repr=False)
class Target:
    """Where the command line connects, as its options and environment say.

    Attributes:
        url: The server URL (for a single server or a cluster), or None.
        cluster: Connect to a Redis Cluster.
        sentinels: Sentinel addresses (then ``master`` names the primary).
        master: The Sentinel service name of the primary.
        tls: TLS to the server (from a ``rediss`` scheme).
        password: The password (from the URL or ``REDIS_PASSWORD``), never shown.
        username: The ACL user name, if any.
        db: The database number (single server and Sentinel only).
        tls_ca_cert: The CA certificate file to verify a TLS server with (for a URL target it
            is also in the URL's ``ssl_ca_certs`` query), or None for the system's CAs.
    """

    url: str | None = None
    cluster: bool = False
    sentinels: tuple[tuple[str, int], ...] = ()
    master: str | None = None
    tls: bool = False
    password: str | None = field(default=None, repr=False)
    username: str | None = None
    db: int = 0
    tls_ca_cert: str | None = None

    def __repr__(self) -> str:
        return f"Target({self.describe()!r})"

    @property
    def kind(self) -> str:
        """``"sentinel"``, ``"cluster"`` or ``"single"``."""
        return "sentinel" if self.sentinels else "cluster" if self.cluster else "single"

    def describe(self) -> str:
        """Where it connects, for messages (no password)."""
        if self.sentinels:
            nodes = ",".join(f"{h}:{p}" for h, p in self.sentinels)
            return f"sentinel {nodes} (primary {self.master!r})"
        shown = mask(self.url or "")
        return f"cluster {shown}" if self.cluster else shown


def target(
    url: str | None,
    *,
    cluster: bool = False,
    sentinels: list[str] | None = None,
    master: str | None = None,
    environ: dict[str, str] | None = None,
    tls_ca_cert: str | None = None,
) -> Target:
    """Resolve the connection options into a :class:`Target`.

    ``tls_ca_cert`` (a CA certificate file, for a ``rediss`` target only) is written into a
    URL target's ``ssl_ca_certs`` query, so that clients made from the URL elsewhere (worker
    processes, the dashboard) verify the server with it too.

    Raises:
        InvalidArgumentError: The options contradict each other or a URL is malformed; the
            message names the option and the fix.
    """
    env = os.environ if environ is None else environ
    password = env.get(PASSWORD_ENV) or None
    found_sentinels = [parse_address(s) for s in sentinels or ()]
    if url and "+sentinel://" in url:
        if found_sentinels:
            raise InvalidArgumentError("give sentinels by --sentinel or in the URL, not both")
        parts = _split(url)
        hosts = parts.netloc.rpartition("@")[2]
        found_sentinels = [parse_address(h) for h in hosts.split(",") if h]
        path = [p for p in parts.path.split("/") if p]
        if not path:
            raise InvalidArgumentError(
                "a Sentinel URL names the primary: redis+sentinel://HOST:PORT/MASTER[/DB]"
            )
        if master and master != path[0]:
            raise InvalidArgumentError(f"--master {master!r} differs from the URL's {path[0]!r}")
        master = unquote(path[0])
        db = _db(path[1] if len(path) > 1 else "0")
        user = unquote(parts.username) if parts.username else None
        secret = unquote(parts.password) if parts.password else password
        tls = url.startswith("rediss")
        return Target(None, False, tuple(found_sentinels), master, tls, secret, user, db,
                      _ca_cert(tls_ca_cert, tls))  # fmt: skip
    if found_sentinels:
        if not master:
            raise InvalidArgumentError("--sentinel needs --master NAME (the primary's name)")
        if cluster:
            raise InvalidArgumentError("--cluster and --sentinel exclude each other")
        user = secret = None
        db = 0
        tls = False
        if url:
            parts = _split(url)
            user = unquote(parts.username) if parts.username else None
            secret = unquote(parts.password) if parts.password else None
            db = _db(parts.path.strip("/") or "0")
            tls = parts.scheme == "rediss"
        return Target(None, False, tuple(found_sentinels), master, tls, secret or password,
                      user, db, _ca_cert(tls_ca_cert, tls))  # fmt: skip
    if master:
        raise InvalidArgumentError("--master names a Sentinel primary: pass --sentinel HOST:PORT")
    if not url:
        raise InvalidArgumentError(
            "no Redis to connect to: pass --url (or set REDIS_URL), --sentinel HOST:PORT "
            "--master NAME, or --cluster --url redis://NODE:PORT"
        )
    parts = _split(url)
    scheme = parts.scheme
    if scheme in ("redis+cluster", "rediss+cluster"):
        cluster = True
        scheme = scheme.removesuffix("+cluster")
        url = urlunsplit((scheme, *parts[1:]))
    if scheme not in ("redis", "rediss", "unix"):
        raise InvalidArgumentError(
            f"bad Redis URL {mask(url)!r}: the scheme must be redis://, rediss:// (TLS), unix://, "
            "redis+cluster:// or redis+sentinel://"
        )
    if cluster and scheme == "unix":
        raise InvalidArgumentError("a cluster is reached over TCP: pass redis://NODE:PORT")
    secret = unquote(parts.password) if parts.password else password
    user = unquote(parts.username) if parts.username else None
    tls = scheme == "rediss"
    query = parse_qs(parts.query)
    in_url = query.get("ssl_ca_certs", [None])[0]
    if in_url is not None and tls_ca_cert is not None and in_url != tls_ca_cert:
        raise InvalidArgumentError(
            "give the CA certificate by --tls-ca-cert or the URL's ssl_ca_certs, not both"
        )
    ca = _ca_cert(tls_ca_cert or in_url, tls)
    if ca is not None and in_url is None:
        query["ssl_ca_certs"] = [ca]
        url = urlunsplit((*urlsplit(url)[:3], urlencode(query, doseq=True), parts.fragment))
    return Target(url, cluster, (), None, tls, secret, user, 0, ca)


def _split(url: str) -> SplitResult:
    """``url`` split, once its user information is known to end where a parser ends it.

    A raw ``/``, ``?`` or ``#`` in a password ends the host part early: the rest of the
    password would be read as the port, the path or the query (and shown in their errors).

    Raises:
        InvalidArgumentError: The URL's port is not a number, or an ``@`` follows the host
            part (the message names the fix, and shows the URL masked).
    """
    parts = urlsplit(url)
    unix = parts.scheme.lower() == "unix"
    port_ok = True
    if not unix and "+sentinel" not in parts.scheme.lower():  # hosts of Sentinel: parse_address
        try:
            _ = parts.port  # a ValueError (naming the text it read) when it is not a port
        except ValueError:
            port_ok = False
    if not port_ok or (not unix and "@" in parts.path + parts.fragment):
        raise InvalidArgumentError(
            f"bad Redis URL {mask(url)!r}: the port is not a port number, or the password holds a "
            "raw '/', '?' or '#' (which ends the host part): percent-encode the password "
            "(%2F for '/', %3F for '?', %23 for '#', %40 for '@')"
        )
    return parts


def _ca_cert(path: str | None, tls: bool) -> str | None:
    """``path`` checked: a readable file, for a TLS target only."""
    if path is None:
        return None
    if not tls:
        raise InvalidArgumentError(
            "a CA certificate (--tls-ca-cert, ssl_ca_certs) is for TLS: use a rediss:// URL"
        )
    if not os.path.isfile(path) or not os.access(path, os.R_OK):
        raise InvalidArgumentError(f"the CA certificate {path!r} is not a readable file")
    return path


def with_credentials(where: Target) -> str:
    """The URL of a single-server or cluster target with its user and password written in.

    For a client made elsewhere (such as by worker processes); never to be shown. A cluster's
    URL keeps its ``+cluster`` scheme (``redis+cluster://NODE:PORT``: see :func:`cluster_node`).
    """
    assert where.url is not None
    parts = urlsplit(where.url)
    scheme = f"{parts.scheme}+cluster" if where.cluster else parts.scheme
    netloc = parts.netloc
    if where.password is not None and not parts.password and parts.scheme != "unix":
        user = quote(where.username or "", safe="")
        host = parts.netloc.rpartition("@")[2]
        netloc = f"{user}:{quote(where.password, safe='')}@{host}"
    return urlunsplit((scheme, netloc, parts.path, parts.query, parts.fragment))


def cluster_node(url: str) -> str | None:
    """The node URL of a Redis Cluster URL, or None for another URL.

    ``redis+cluster://NODE:PORT`` (``rediss+cluster://`` for TLS) names a cluster by one of its
    nodes; the node URL is the same with ``redis://`` (``rediss://``), for
    ``RedisCluster.from_url``.
    """
    scheme, sep, rest = url.partition("://")
    if sep and scheme.lower() in ("redis+cluster", "rediss+cluster"):
        return f"{scheme.lower().removesuffix('+cluster')}://{rest}"
    return None


def _db(text: str) -> int:
    if not text.isdigit():
        raise InvalidArgumentError(f"the database in a Redis URL is a number, not {text!r}")
    return int(text)


def connect(where: Target, timeout: float, **options: Any) -> Any:
    """A client for ``where``; ``timeout`` is both the connect and the socket timeout (seconds).

    ``options`` go to the client (such as ``max_connections``).

    Raises:
        InvalidArgumentError: The URL is malformed.
    """
    common: dict[str, Any] = {"socket_timeout": timeout, "socket_connect_timeout": timeout}
    common.update(options)
    if where.password is not None:
        common["password"] = where.password
    if where.username is not None:
        common["username"] = where.username
    try:
        if where.sentinels:
            sentinel_options = {"socket_timeout": timeout, "socket_connect_timeout": timeout}
            make: Any = Sentinel
            sentinel = make(list(where.sentinels), sentinel_kwargs=sentinel_options)
            if where.tls:
                common["ssl"] = True
                if where.tls_ca_cert is not None:
                    common["ssl_ca_certs"] = where.tls_ca_cert
            assert where.master is not None
            return sentinel.master_for(where.master, db=where.db, **common)
        assert where.url is not None
        if where.cluster:
            common.pop("max_connections", None)
            return RedisCluster.from_url(where.url, **common)
        return redis.Redis.from_url(where.url, **common)
    except ValueError as err:
        raise InvalidArgumentError(f"bad Redis URL {where.describe()!r}: {mask(str(err))}") from err
    except RedisClusterException as err:  # no node answered: Redis cannot be reached
        raise redis.ConnectionError(mask(str(err))) from err
