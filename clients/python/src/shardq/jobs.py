"""The job types of the shardq client: what is enqueued, what an enqueue
answers, and a job as a claim or ``GET /v1/jobs/{id}`` returns it."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional

from .errors import ConfigError

#: Every enqueue outcome shardqd answers (docs/http.md, "POST /v1/jobs").
OUTCOMES = ("inserted", "duplicate", "replaced", "merged", "rerun", "not_written", "unknown")


@dataclass
class NewJob:
    """A job to enqueue. Only ``type`` is required.

    Attributes:
        type: a type configured in a ``[type NAME]`` section of the cluster.
        params: a JSON object (at most 1 MiB); None: ``{}``.
        key: the dedup key (1-512 bytes of UTF-8). A second live job with
            the same (type, key) is answered per the type's dedup policy
            (``duplicate``, ``replaced``, ``merged``, ``rerun``).
        priority: higher runs first; None: the type's.
        delay_ms: run no earlier than this many milliseconds from now.
        run_at_ms: run no earlier than this time (ms since the epoch); not
            with ``delay_ms``.
        delay_tolerance_ms: how late past its schedule the job may start.
        max_attempts: runs before the job fails for good; None: the type's.
    """

    type: str
    params: Optional[Mapping[str, Any]] = None
    key: Optional[str] = None
    priority: Optional[int] = None
    delay_ms: Optional[int] = None
    run_at_ms: Optional[int] = None
    delay_tolerance_ms: Optional[int] = None
    max_attempts: Optional[int] = None

    def to_json(self) -> Dict[str, Any]:
        """The job as the enqueue's JSON object (fields left None are left
        out, so the type's defaults apply)."""
        if not isinstance(self.type, str) or not self.type:
            raise ConfigError(f"NewJob.type must be a non-empty string, not {self.type!r}")
        out: Dict[str, Any] = {"type": self.type}
        for name in ("params", "key", "priority", "delay_ms", "run_at_ms",
                     "delay_tolerance_ms", "max_attempts"):
            v = getattr(self, name)
            if v is not None:
                out[name] = dict(v) if name == "params" else v
        return out


@dataclass(frozen=True)
class EnqueueResult:
    """What an enqueue did with one job, in the order the jobs were given.

    Attributes:
        id: the job's id (for ``duplicate``: the id of the live job that was
            kept); -1 when nothing was written.
        outcome: one of :data:`OUTCOMES`.
        shard: the shard the job lives on.
    """

    id: int
    outcome: str
    shard: str

    @property
    def inserted(self) -> bool:
        """True when a new job was written."""
        return self.outcome == "inserted"

    @property
    def duplicate(self) -> bool:
        """True when a live job with the same (type, key) was kept."""
        return self.outcome == "duplicate"

    @property
    def written(self) -> bool:
        """True unless the job was not written (or may not have been)."""
        return self.outcome not in ("not_written", "unknown")


def _int_or_none(v: Any) -> Optional[int]:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


@dataclass
class Job:
    """A job as shardqd returns it (a claim, ``GET /v1/jobs/{id}``).

    The fence of a claimed job is (``id``, ``attempt``, ``worker``) exactly
    as returned: ``worker`` is the daemon's worker id, not the client's name.

    ``lease_lost`` is set (by :class:`shardq.Worker`) once the run no longer
    holds the job's lease: a heartbeat answered ``lost`` (another worker
    took it, or it was cancelled), or the lease ran out before a heartbeat
    got through. A handler that runs long should check it and return; its
    result is dropped either way.
    """

    id: int
    attempt: int
    worker: Optional[str]
    type: str
    key: Optional[str]
    params: Dict[str, Any]
    status: str
    priority: int = 0
    tries: int = 0
    max_attempts: int = 0
    shard: str = ""
    schedule_ms: Optional[int] = None
    delay_tolerance_ms: Optional[int] = None
    lease_until_ms: Optional[int] = None
    created_ms: Optional[int] = None
    lease_lost: threading.Event = field(default_factory=threading.Event, repr=False,
                                        compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Job":
        """A Job from the daemon's JSON object."""
        try:
            params = d.get("params")
            return cls(
                id=int(d["id"]),
                attempt=int(d["attempt"]),
                worker=d.get("worker"),
                type=str(d["type"]),
                key=d.get("key"),
                params=params if isinstance(params, dict) else {},
                status=str(d.get("status", "")),
                priority=_int_or_none(d.get("priority")) or 0,
                tries=_int_or_none(d.get("tries")) or 0,
                max_attempts=_int_or_none(d.get("max_attempts")) or 0,
                shard=str(d.get("shard", "")),
                schedule_ms=_int_or_none(d.get("schedule_ms")),
                delay_tolerance_ms=_int_or_none(d.get("delay_tolerance_ms")),
                lease_until_ms=_int_or_none(d.get("lease_until_ms")),
                created_ms=_int_or_none(d.get("created_ms")),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"not a job as shardqd returns one ({e!r}): {dict(d)!r:.300}") from None

    @property
    def ref(self) -> Dict[str, Any]:
        """The job's fence, as the fenced calls take it."""
        return {"id": self.id, "attempt": self.attempt, "worker": self.worker}
