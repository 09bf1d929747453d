"""The HTTP side of the shardq client: :class:`Client`, one per process (or
per daemon), shared by every thread; each thread keeps its own kept-alive
connection to shardqd."""

from __future__ import annotations

import http.client
import json
import logging
import socket
import threading
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence

from .errors import ApiError, ConfigError, NotFoundError, TransportError, api_error
from .jobs import Job

log = logging.getLogger("shardq")

#: Jobs or references per call at most (the API's limit).
BATCH_MAX = 10000
#: The longest Retry-After the client obeys (a longer one is cut to this).
RETRY_AFTER_MAX = 30.0
FENCED_CALLS = ("start", "heartbeat", "complete", "fail", "release")


@dataclass
class Reply:
    """A reply of shardqd: its status, its body (parsed JSON when the reply
    is JSON, else text) and its headers."""

    status: int
    body: Any
    headers: Mapping[str, str]

    @property
    def retry_after(self) -> float:
        """The reply's ``Retry-After`` in seconds (1 when absent or not a
        number of seconds), at most :data:`RETRY_AFTER_MAX`."""
        try:
            v = float(self.headers.get("Retry-After", "1"))
        except (TypeError, ValueError):
            v = 1.0
        return min(max(v, 0.0), RETRY_AFTER_MAX)


class Connection:
    """One kept-alive HTTP/1.1 connection to shardqd. Not thread-safe: the
    :class:`Client` gives each thread its own. ``half_close`` may be called
    from another thread to end a waiting long poll (see docs/http.md,
    "Coalescing": the daemon answers it ``{"jobs":[]}`` and hands back the
    jobs dealt to it)."""

    def __init__(self, client: "Client") -> None:
        self._c = client
        self._conn: Optional[http.client.HTTPConnection] = None
        self._lock = threading.Lock()  # guards _conn against half_close
        self._shut = False  # half_close()d: the request under way ends

    def close(self) -> None:
        """Closes the connection (the next request opens a new one)."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            self._shut = False

    def half_close(self) -> bool:
        """Shuts the sending side of the connection, if it is open: a
        request waiting on it is answered at once. True if it was open."""
        with self._lock:
            sock = self._conn.sock if self._conn is not None else None
            if sock is None:
                return False
            self._shut = True
            try:
                sock.shutdown(socket.SHUT_WR)
            except OSError:
                return False
            return True

    def connect(self, timeout: float) -> None:
        """Opens the connection now if it is not open (so that a
        ``half_close`` from another thread finds a socket)."""
        with self._lock:
            if self._conn is None:
                c = self._c
                cls = http.client.HTTPSConnection if c.https else http.client.HTTPConnection
                self._conn = cls(c.host, c.port, timeout=timeout)
            conn = self._conn
        if conn.sock is None:
            try:
                conn.connect()
            except OSError as e:
                self.close()
                raise TransportError("CONNECT", self._c.url, str(e) or type(e).__name__) from None
            conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def request(self, method: str, path: str, body: Optional[Any] = None,
                timeout: Optional[float] = None) -> Reply:
        """Sends one request and reads its reply (any status). Raises
        :class:`TransportError` when no reply could be read. A kept-alive
        connection the daemon closed while idle (``request_timeout``) is
        opened again and the request sent once more."""
        c = self._c
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        headers = {"Authorization": f"Bearer {c.token}", "Accept": "application/json",
                   "User-Agent": c.user_agent}
        if data is not None:
            headers["Content-Type"] = "application/json"
        to = c.timeout if timeout is None else timeout
        url = c.base + path
        for _ in range(2):
            if self._shut:
                self.close()
                raise TransportError(method, c.url + path, "the connection was shut")
            fresh = self._conn is None or self._conn.sock is None
            self.connect(to)
            conn = self._conn
            assert conn is not None and conn.sock is not None
            conn.sock.settimeout(to)
            try:
                conn.request(method, url, body=data, headers=headers)
                resp = conn.getresponse()
                raw = resp.read()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as e:
                shut = self._shut
                self.close()
                if fresh or shut:
                    raise TransportError(method, c.url + path, str(e) or type(e).__name__) from None
                continue  # the daemon closed an idle kept-alive connection
            except socket.timeout:
                self.close()
                raise TransportError(method, c.url + path, f"no reply within {to:g}s") from None
            except (OSError, http.client.HTTPException) as e:
                self.close()
                raise TransportError(method, c.url + path, str(e) or type(e).__name__) from None
            if resp.will_close:
                self.close()
            ctype = resp.getheader("Content-Type", "") or ""
            parsed: Any
            if ctype.startswith("application/json"):
                try:
                    parsed = json.loads(raw)
                except ValueError:
                    parsed = raw.decode("utf-8", "replace")
            else:
                parsed = raw.decode("utf-8", "replace")
            return Reply(resp.status, parsed, resp.headers)
        raise TransportError(method, c.url + path, "the connection was closed twice in a row")


class Client:
    """A client of one shardqd.

    Args:
        url: the daemon, ``http://HOST:PORT`` (or ``https://`` behind a TLS
            proxy), optionally with a path prefix.
        token: a token with the scopes the calls need (``producer`` for
            enqueue and cancel, ``worker`` for claims and results).
        timeout: seconds to wait for a reply (a claim waits its ``wait_ms``
            more). Keep it above the cluster's ``moving_wait`` (30 s): a
            write to a moving partition may wait that long.
        retry_budget: how long a call answered 503 (``unavailable``,
            ``moving``) or not answered at all is sent again, after each
            reply's ``Retry-After``, before its error is raised; None: for
            ever.
        user_agent: sent as ``User-Agent``.

    The client is thread-safe: each thread uses a kept-alive connection of
    its own.
    """

    def __init__(self, url: str, token: str, *, timeout: float = 60.0,
                 retry_budget: Optional[float] = 60.0,
                 user_agent: str = "shardq-python/0.1") -> None:
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ConfigError(f"url {url!r}: expected http://HOST:PORT or https://HOST:PORT")
        if not token or not isinstance(token, str):
            raise ConfigError("token: a shardqd token is required (see docs/http.md, "
                              "\"Authentication and scopes\")")
        if timeout <= 0:
            raise ConfigError(f"timeout must be above 0, not {timeout!r}")
        self.url = url.rstrip("/")
        self.https = u.scheme == "https"
        self.host = u.hostname
        try:
            self.port = u.port or (443 if self.https else 80)
        except ValueError as e:
            raise ConfigError(f"url {url!r}: {e}") from None
        self.base = u.path.rstrip("/")
        self.token = token
        self.timeout = float(timeout)
        self.retry_budget = retry_budget
        self.user_agent = user_agent
        self._local = threading.local()
        self._all: List[Connection] = []
        self._all_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"Client({self.url!r})"

    def connection(self) -> Connection:
        """This thread's connection."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self.new_connection()
            self._local.conn = conn
        return conn

    def new_connection(self) -> Connection:
        """A connection of its own (for a long poll that another thread may
        end with :meth:`Connection.half_close`)."""
        conn = Connection(self)
        with self._all_lock:
            self._all.append(conn)
        return conn

    def close(self) -> None:
        """Closes every connection of this client."""
        with self._all_lock:
            conns, self._all = self._all, []
        for c in conns:
            c.close()
        self._local = threading.local()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---- calls ------------------------------------------------------------

    def request(self, method: str, path: str, body: Optional[Any] = None, *,
                timeout: Optional[float] = None, conn: Optional[Connection] = None) -> Reply:
        """One request, any status answered; :class:`TransportError` when no
        reply came."""
        return (conn or self.connection()).request(method, path, body, timeout)

    def call(self, what: str, method: str, path: str, body: Optional[Any] = None, *,
             ok: Sequence[int] = (200,), timeout: Optional[float] = None,
             retry: bool = True, stop: Optional[Callable[[], bool]] = None) -> Reply:
        """A request whose status must be one of ``ok``. A 503 or no reply
        is sent again after ``Retry-After`` (or 0.5 s doubling to 5 s
        without a reply) within :attr:`retry_budget`; ``stop()`` true ends
        the retries early. Other statuses raise the :class:`ApiError` of
        their kind."""
        give_up = None if self.retry_budget is None else time.monotonic() + self.retry_budget
        backoff = 0.5
        while True:
            try:
                r = self.request(method, path, body, timeout=timeout)
            except TransportError:
                if not retry or (stop and stop()) or (give_up and time.monotonic() + backoff > give_up):
                    raise
                log.warning("%s: no reply from %s; sending again in %.1fs", what, self.url, backoff)
                time.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            if r.status in ok:
                return r
            if r.status == 503 and retry and not (stop and stop()):
                wait = r.retry_after
                if give_up is None or time.monotonic() + wait <= give_up:
                    log.info("%s", api_error(what, r.status, r.body).args[0] + f"; again in {wait:g}s")
                    time.sleep(wait)
                    continue
            raise api_error(what, r.status, r.body, r.retry_after)

    def healthz(self) -> bool:
        """True when the daemon answers ``GET /healthz`` (not whether every
        shard is up)."""
        try:
            r = self.request("GET", "/healthz", timeout=min(self.timeout, 10.0))
        except TransportError:
            return False
        return r.status == 200

    def get_job(self, job_id: int) -> Job:
        """``GET /v1/jobs/{id}``: the job in any status (``completed`` only
        when its type keeps history). Raises :class:`NotFoundError` for an
        unknown id."""
        r = self.call(f"get job {job_id}", "GET", f"/v1/jobs/{int(job_id)}")
        return Job.from_json(r.body)

    def find_job(self, job_id: int) -> Optional[Job]:
        """Like :meth:`get_job`, but None for an unknown id."""
        try:
            return self.get_job(job_id)
        except NotFoundError:
            return None

    def cancel(self, ids: Iterable[int]) -> Dict[int, str]:
        """Cancels live jobs by id: ``{id: "ok" | "not_found"}``. The ids
        whose shard could not be reached (a 503) are sent again after its
        ``Retry-After`` within the retry budget, then
        :class:`UnavailableError` is raised."""
        out: Dict[int, str] = {}
        ids = [int(i) for i in ids]
        for i in range(0, len(ids), BATCH_MAX):
            chunk = ids[i:i + BATCH_MAX]
            give_up = None if self.retry_budget is None else time.monotonic() + self.retry_budget
            while chunk:
                r = self.call("cancel", "POST", "/v1/jobs/cancel", {"ids": chunk}, ok=(200, 503),
                              retry=False)
                results = r.body.get("results") if isinstance(r.body, dict) else None
                if not isinstance(results, list) or len(results) != len(chunk):
                    raise api_error("cancel", r.status, r.body, r.retry_after)
                again = []
                for jid, res in zip(chunk, results):
                    what = res.get("result") if isinstance(res, dict) else None
                    if what in ("unavailable", "moving"):
                        again.append(jid)
                    else:
                        out[jid] = str(what)
                if again:
                    if give_up is not None and time.monotonic() + r.retry_after > give_up:
                        raise api_error("cancel", r.status, r.body, r.retry_after)
                    time.sleep(r.retry_after)
                chunk = again
        return out

    def cancel_key(self, type: str, key: str) -> int:
        """Cancels the live job with this (type, key); returns its id.
        Raises :class:`NotFoundError` when there is none."""
        r = self.call("cancel by key", "POST", "/v1/jobs/cancel", {"type": type, "key": key})
        return int(r.body["results"][0]["id"])

    def claim(self, types: Mapping[str, int], *, name: str, wait_ms: int = 0,
              start: bool = True, conn: Optional[Connection] = None) -> List[Job]:
        """``POST /v1/claim`` once: up to ``types[T]`` jobs of each type T,
        waiting up to ``wait_ms`` for some. ``start`` True: they come back
        ``running`` (under the starting lease until their first heartbeat);
        False: ``starting``. Raises :class:`UnavailableError` on a 503
        (not retried here: a worker decides)."""
        body = {"worker": name, "types": [{"type": t, "limit": int(n)} for t, n in types.items()],
                "wait_ms": int(wait_ms), "start": bool(start)}
        r = self.request("POST", "/v1/claim", body, conn=conn,
                         timeout=self.timeout + wait_ms / 1000.0)
        what = f"claim of {', '.join(types)}"  # the daemon's message says types[N]
        if r.status != 200:
            raise api_error(what, r.status, r.body, r.retry_after)
        jobs = r.body.get("jobs") if isinstance(r.body, dict) else None
        if not isinstance(jobs, list):
            raise ApiError(what, r.status, r.body)
        return [Job.from_json(j) for j in jobs]

    def fenced(self, kind: str, refs: Sequence[Mapping[str, Any]], *,
               conn: Optional[Connection] = None) -> "FencedReply":
        """One fenced call (``start``, ``heartbeat``, ``complete``, ``fail``,
        ``release``) for up to :data:`BATCH_MAX` references, not retried:
        the per-job results, in input order, with the reply's status and
        Retry-After. Raises :class:`ApiError` for a status other than 200,
        409 and 503-with-results, :class:`TransportError` when no reply
        came."""
        if kind not in FENCED_CALLS:
            raise ConfigError(f"fenced call {kind!r}: one of {', '.join(FENCED_CALLS)}")
        if not 1 <= len(refs) <= BATCH_MAX:
            raise ConfigError(f"{kind}: 1 to {BATCH_MAX} jobs per call, not {len(refs)}")
        r = self.request("POST", f"/v1/jobs/{kind}", {"jobs": list(refs)}, conn=conn)
        results = r.body.get("results") if isinstance(r.body, dict) else None
        if r.status in (200, 409, 503) and isinstance(results, list) and len(results) == len(refs):
            err = None if r.status == 200 else api_error(kind, r.status, r.body, r.retry_after)
            return FencedReply(r.status, [x if isinstance(x, dict) else {} for x in results],
                               r.retry_after, err)
        if r.status == 503:
            err = api_error(kind, r.status, r.body, r.retry_after)
            return FencedReply(503, [{"result": "unavailable"}] * len(refs), r.retry_after, err)
        raise api_error(kind, r.status, r.body, r.retry_after)


@dataclass
class FencedReply:
    """The reply of a fenced call: ``results`` one dict per reference, in
    input order (``{"id":..., "result": "ok" | "lost" | "not_found" |
    "moving" | "unavailable", ["lease_until_ms": ...]}``); ``error`` the
    reply's error for 409 and 503."""

    status: int
    results: List[Dict[str, Any]]
    retry_after: float
    error: Optional[ApiError]
