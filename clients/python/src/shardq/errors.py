"""The exceptions of the shardq client.

Every exception the client raises is a :class:`ShardqError`. Those that come
from a reply of shardqd are :class:`ApiError` and carry the HTTP status, the
daemon's error ``code`` and its ``message`` (which names what was wrong and
what to do); the subclasses let a caller catch the kinds it can act on.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional


class ShardqError(Exception):
    """The base of every error this package raises."""


class ConfigError(ShardqError, ValueError):
    """A bad argument given to the client (an URL, a type's limit, ...)."""


class TransportError(ShardqError):
    """No usable answer from shardqd: connection refused or reset, a
    timeout, or a reply that is not HTTP. Whether the request was applied
    is unknown; every call of the API is safe to send again (enqueues with
    keys dedup, fenced calls answer ``lost`` the second time)."""

    def __init__(self, method: str, url: str, reason: str) -> None:
        self.method = method
        self.url = url
        self.reason = reason
        super().__init__(f"{method} {url}: {reason}")


class ApiError(ShardqError):
    """shardqd answered with an error status.

    Attributes:
        status: the HTTP status (400, 401, 403, 404, 409, 503, ...).
        code: the daemon's error code (``bad_request``, ``unavailable``, ...;
            ``"?"`` when the body was not the daemon's JSON error).
        message: the daemon's message.
        body: the parsed JSON body (a dict), or the text of a non-JSON body.
    """

    def __init__(self, what: str, status: int, body: Any) -> None:
        self.what = what
        self.status = status
        self.body = body
        err = body.get("error") if isinstance(body, dict) else None
        if isinstance(err, dict):
            self.code: str = str(err.get("code", "?"))
            self.message: str = str(err.get("message", ""))
        else:
            self.code = "?"
            text = body if isinstance(body, str) else repr(body)
            self.message = " ".join(text.split())[:300]
        super().__init__(f"{what}: shardqd answered {status} {self.code}: {self.message}")

    @property
    def results(self) -> Optional[List[Dict[str, Any]]]:
        """The per-job ``results`` the reply carried (enqueues and fenced
        calls answer them with 409 and 503 too), else None."""
        r = self.body.get("results") if isinstance(self.body, dict) else None
        return r if isinstance(r, list) else None


class BadRequestError(ApiError):
    """400 (``bad_json``, ``bad_request``, ``bad_job``): the request must
    change; sending it again will not help. For ``bad_job`` the message
    starts ``job N:`` with N counted from 0 in the batch sent."""


class AuthError(ApiError):
    """401 ``unauthorized`` (no token or an unknown one) or 403
    ``forbidden`` (the token lacks the scope: ``worker`` for claims and
    results, ``producer`` for enqueue and cancel, ``admin`` for stats)."""


class NotFoundError(ApiError):
    """404 ``not_found``: an unknown job id, or a cancel by key that found
    no live job."""


class LostError(ApiError):
    """409 ``lost``: a fenced call found jobs no longer held under the
    fence. The worker handles it per job; it is raised only by the low
    level :meth:`shardq.Client.fenced` when asked to."""


class UnavailableError(ApiError):
    """503 (``unavailable`` or ``moving``): a shard could not be reached, a
    partition is moving, or the daemon is stopping. Retried by the client
    after ``Retry-After`` until its retry budget is spent; raised after
    that. ``retry_after`` holds the seconds the daemon asked to wait."""

    def __init__(self, what: str, status: int, body: Any, retry_after: float) -> None:
        super().__init__(what, status, body)
        self.retry_after = retry_after


def api_error(what: str, status: int, body: Any, retry_after: float = 1.0) -> ApiError:
    """The :class:`ApiError` subclass for a reply's status."""
    if status == 503:
        return UnavailableError(what, status, body, retry_after)
    if status in (401, 403):
        return AuthError(what, status, body)
    if status == 404:
        return NotFoundError(what, status, body)
    if status == 409:
        return LostError(what, status, body)
    if status == 400 or status == 413:
        return BadRequestError(what, status, body)
    return ApiError(what, status, body)
