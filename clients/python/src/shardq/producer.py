"""The producer: batched enqueues with their dedup outcomes."""

from __future__ import annotations

import logging
import time
from typing import Any, Dict, Iterable, List, Mapping, Optional, Union

from .client import BATCH_MAX, Client
from .errors import ConfigError, UnavailableError, api_error
from .jobs import EnqueueResult, NewJob

log = logging.getLogger("shardq")

JobLike = Union[NewJob, Mapping[str, Any]]


def _to_json(job: JobLike, index: int) -> Dict[str, Any]:
    if isinstance(job, NewJob):
        return job.to_json()
    if isinstance(job, Mapping):
        if not isinstance(job.get("type"), str) or not job.get("type"):
            raise ConfigError(f"job {index}: a job needs a \"type\" (a non-empty string): {dict(job)!r:.200}")
        return dict(job)
    raise ConfigError(f"job {index}: expected a NewJob or a dict, not {type(job).__name__}")


class Producer:
    """Enqueues jobs in batches through ``POST /v1/jobs``.

    Args:
        client: the :class:`Client` (its token needs the ``producer`` scope).
        batch_size: jobs per request, 1 to 10,000. A batch is one statement
            per shard: larger batches cost the shards less per job.

    A batch that a shard could not take (503 ``unavailable`` or
    ``moving``) is not failed as a whole: the jobs the other shards wrote
    keep their results, and exactly the jobs answered ``not_written`` or
    ``unknown`` are sent again after the reply's ``Retry-After``, within the
    client's ``retry_budget``. Sending ``not_written`` jobs again never makes
    a duplicate, and ``unknown`` ones have keys, which dedup.
    """

    def __init__(self, client: Client, *, batch_size: int = 1000) -> None:
        if not 1 <= batch_size <= BATCH_MAX:
            raise ConfigError(f"batch_size must be 1 to {BATCH_MAX}, not {batch_size!r}")
        self.client = client
        self.batch_size = batch_size

    def enqueue(self, jobs: Iterable[JobLike]) -> List[EnqueueResult]:
        """Enqueues the jobs; returns one :class:`EnqueueResult` per job, in
        the order given (``inserted``, ``duplicate``, ``replaced``,
        ``merged`` or ``rerun``).

        Raises:
            BadRequestError: a job was refused (``bad_job``: the message
                names it as ``job N`` counted from 0 in the whole list, not
                the batch); nothing of that batch was written, the earlier
                batches were.
            UnavailableError: a shard stayed unreachable past the retry
                budget; its ``results`` holds what became of every job of
                the list (``not_written`` or ``unknown`` for those left).
            AuthError: the token is unknown or lacks the ``producer`` scope.
            TransportError: no reply from the daemon (within the budget
                when every job of the batch has a key; at once otherwise,
                since the batch may have been written and sending jobs
                without keys again could make duplicates: the error then
                leaves that batch's fate unknown).
        """
        body = [_to_json(j, i) for i, j in enumerate(jobs)]
        out: List[Optional[EnqueueResult]] = [None] * len(body)
        for start in range(0, len(body), self.batch_size):
            self._batch(body, start, min(start + self.batch_size, len(body)), out)
        return [r for r in out if r is not None]

    def enqueue_one(self, type: str, params: Optional[Mapping[str, Any]] = None, *,
                    key: Optional[str] = None, **fields: Any) -> EnqueueResult:
        """Enqueues one job (``fields``: the other :class:`NewJob` fields)."""
        return self.enqueue([NewJob(type=type, params=params, key=key, **fields)])[0]

    def _batch(self, body: List[Dict[str, Any]], lo: int, hi: int,
               out: List[Optional[EnqueueResult]]) -> None:
        c = self.client
        todo = list(range(lo, hi))
        give_up = None if c.retry_budget is None else time.monotonic() + c.retry_budget
        while todo:
            # A batch whose reply never came may have been written: sending it
            # again is safe only when every job has a key (the key dedups).
            keyed = all(body[i].get("key") is not None for i in todo)
            r = c.call("enqueue", "POST", "/v1/jobs", {"jobs": [body[i] for i in todo]},
                       ok=(200, 400, 503), retry=keyed)
            if r.status == 400:
                raise api_error("enqueue", 400, _renumber(r.body, todo))
            results = r.body.get("results") if isinstance(r.body, dict) else None
            if not isinstance(results, list) or len(results) != len(todo):
                if r.status == 503:
                    # no per-job results: nothing is known to be written
                    results = [{"id": -1, "outcome": "not_written", "shard": ""}] * len(todo)
                else:
                    raise api_error("enqueue", r.status, r.body)
            again = []
            for i, res in zip(todo, results):
                er = EnqueueResult(int(res.get("id", -1)), str(res.get("outcome", "unknown")),
                                   str(res.get("shard", "")))
                out[i] = er
                if not er.written:
                    again.append(i)
            if not again:
                return
            err = api_error("enqueue", r.status, r.body, r.retry_after)
            if give_up is not None and time.monotonic() + r.retry_after > give_up:
                assert isinstance(err, UnavailableError)
                err.body = dict(err.body) if isinstance(err.body, dict) else {}
                err.body["results"] = [
                    {"id": x.id, "outcome": x.outcome, "shard": x.shard} if x else
                    {"id": -1, "outcome": "not_written", "shard": ""} for x in out]
                raise err
            log.info("%s; sending its %d jobs again in %gs", err.args[0], len(again),
                     r.retry_after)
            time.sleep(r.retry_after)
            todo = again


def _renumber(body: Any, todo: List[int]) -> Any:
    """A ``bad_job`` error's ``job N`` counted in the caller's whole list
    rather than in the request sent."""
    try:
        msg = body["error"]["message"]
        if msg.startswith("job "):
            n, rest = msg[4:].split(":", 1)
            body = dict(body)
            body["error"] = dict(body["error"], message=f"job {todo[int(n)]}:{rest}")
    except (KeyError, TypeError, ValueError, IndexError):
        pass
    return body
