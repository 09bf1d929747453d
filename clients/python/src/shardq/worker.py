"""The worker: claims jobs of some types through shardqd, runs a handler on
each, heartbeats them and writes their results in batches.

Threads (all daemon threads, started by :meth:`Worker.run`):

- one *claimer* per type: long-poll claims (``wait_ms``) for as many jobs
  as the type has room for (its limit, plus the prefetch), each on a
  connection of its own;
- ``limit`` *handler* threads per type, which run the handler;
- one *writer*, on a connection of its own: every round it sends the
  completions, the failures, the heartbeats that are due and the releases,
  one call per kind for all the jobs that wait (so a busy worker writes
  many results per request).

Leases (docs/http.md, "The life cycle of a job over HTTP"): a claimed job
holds the type's starting lease; each heartbeat sets it to now + the
type's ``execution_timeout`` and answers it, and the next heartbeat is due
a third of the way to it. A job whose heartbeat answers ``lost``, or whose
lease runs out here before a heartbeat got through, is no longer this
run's: ``job.lease_lost`` is set, no more heartbeats go out, and its
result is dropped.
"""

from __future__ import annotations

import collections
import logging
import os
import signal
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Deque, Dict, List, Mapping, Optional, Tuple

from .client import BATCH_MAX, Client, Connection
from .errors import ApiError, AuthError, BadRequestError, ConfigError, TransportError, \
    UnavailableError
from .jobs import Job

log = logging.getLogger("shardq")

Handler = Callable[[Job], Any]


class PermanentError(Exception):
    """Raised by a handler: fail the job for good, with no retry. Any
    exception with an attribute ``permanent = True`` does the same."""

    permanent = True


@dataclass
class WorkerStats:
    """What a worker did (counts of jobs).

    Attributes:
        claimed: jobs its claims brought.
        completed: completions written.
        failed: failures written (retried or for good, by the type's policy).
        lost: runs whose lease was no longer theirs (their result dropped).
        released: unstarted jobs handed back to ``ready`` (no try counted).
        heartbeats: heartbeats written.
        retries: calls answered 503 (or not at all) and sent again.
    """

    claimed: int = 0
    completed: int = 0
    failed: int = 0
    lost: int = 0
    released: int = 0
    heartbeats: int = 0
    retries: int = 0


class _Held:
    """A job this worker holds, from its claim to its written result."""

    __slots__ = ("job", "started", "running", "lease_end", "beat_due", "outcome", "error",
                 "permanent", "retry_at", "claimed_at", "half_lease_at", "releasing")

    def __init__(self, job: Job, lease_end: float, started: bool) -> None:
        self.job = job
        self.started = started  # its start (or a heartbeat) is written
        self.running = False  # a handler has taken it
        self.outcome: Optional[str] = None  # "complete" / "fail" once the handler returned
        self.error = ""
        self.permanent = False
        self.retry_at = 0.0  # a 503'd write waits until then
        self.releasing = False  # in Worker._release
        now = time.monotonic()
        self.claimed_at = now
        self.half_lease_at = now + max(lease_end - now, 0.0) / 2.0
        self.lease_end = lease_end
        self.beat_due = lease_end
        self.set_lease(lease_end)

    def set_lease(self, lease_end: float) -> None:
        now = time.monotonic()
        self.lease_end = lease_end
        self.beat_due = now + max(lease_end - now, 0.0) / 3.0


class Worker:
    """Runs ``handler(job)`` for jobs of the given types.

    Args:
        client: the :class:`Client` (its token needs the ``worker`` scope).
        types: ``{type: limit}``: the most jobs of each type run at once
            (one handler thread each).
        handler: called with each :class:`Job`. Returning completes the job;
            raising fails it with the exception's text (for good if it is a
            :class:`PermanentError` or has ``permanent = True``), and the
            type's retry policy decides the rest. It runs on a thread of its
            own and must be thread-safe. A long handler should look at
            ``job.lease_lost`` and return once it is set.
        name: names this worker in the daemon's records and the logs
            (default ``py-HOST-PID``).
        prefetch: jobs held per type beyond the free slots, so that a slot
            that frees finds a job at once (claimed ``starting``; started
            when a slot takes them; released on stop). 0: none; jobs are
            claimed straight to ``running`` for free slots only.
        wait_ms: how long a claim waits for jobs when there are none (cut by
            the daemon to its ``claim_wait_max``, 20 s by default).
        grace: seconds a stop lets running handlers finish and their results
            be written; what is left after it comes back to another worker
            once its lease runs out.
        lease_fallback: the lease assumed (seconds) when a reply carries no
            ``lease_until_ms``, or one this host's clock has already passed
            (the clocks disagree).
        install_signals: :meth:`run` called on the main thread makes SIGTERM
            and SIGINT stop the worker gracefully (a second one exits the
            process at once, status 1), and restores the old handlers when
            it returns.
    """

    def __init__(self, client: Client, types: Mapping[str, int], handler: Handler, *,
                 name: Optional[str] = None, prefetch: int = 0, wait_ms: int = 10000,
                 grace: float = 30.0, lease_fallback: float = 30.0,
                 install_signals: bool = True) -> None:
        if not types:
            raise ConfigError("types: at least one {type: limit} is needed")
        for t, n in types.items():
            if not isinstance(t, str) or not t:
                raise ConfigError(f"types: a type must be a non-empty string, not {t!r}")
            if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= 10000:
                raise ConfigError(f"types[{t!r}]: the limit must be an integer from 1 to 10000, "
                                  f"not {n!r}")
        if len(types) > 32:
            raise ConfigError(f"types: at most 32 types per worker, not {len(types)}")
        if not isinstance(prefetch, int) or not 0 <= prefetch <= 10000:
            raise ConfigError(f"prefetch must be an integer from 0 to 10000, not {prefetch!r}")
        if not callable(handler):
            raise ConfigError(f"handler must be callable, not {type(handler).__name__}")
        if wait_ms < 0:
            raise ConfigError(f"wait_ms must be 0 or more, not {wait_ms!r}")
        self.client = client
        self.types: Dict[str, int] = dict(types)
        self.handler = handler
        self.name = name or f"py-{socket.gethostname()}-{os.getpid()}"
        self.prefetch = prefetch
        self.wait_ms = int(wait_ms)
        self.grace = float(grace)
        self.lease_fallback = float(lease_fallback)
        self.install_signals = install_signals
        self.stats = WorkerStats()
        self.error: Optional[BaseException] = None

        self._cv = threading.Condition()
        self._held: Dict[Tuple[int, int], _Held] = {}
        self._queue: Dict[str, Deque[_Held]] = {t: collections.deque() for t in self.types}
        self._running: Dict[str, int] = {t: 0 for t in self.types}
        self._unwritten: Dict[str, int] = {t: 0 for t in self.types}
        self._release: List[_Held] = []  # unstarted jobs to hand back
        self._claim_conns: Dict[str, Connection] = {}
        self._in_flight: Dict[str, bool] = {t: False for t in self.types}
        self._stopping = False
        self._stop_deadline: Optional[float] = None
        self._signalled = 0
        self._threads: List[threading.Thread] = []
        self._clock_warned = False

    # ---- the public side -------------------------------------------------

    def run(self) -> WorkerStats:
        """Runs until :meth:`stop` (or SIGTERM/SIGINT, see
        ``install_signals``) and the graceful stop is over; returns the
        stats. Raises the error that stopped the worker, if one did (an
        :class:`AuthError` for a token refused, a :class:`BadRequestError`
        for a type the daemon does not know, ...)."""
        old: Dict[int, Any] = {}
        if self.install_signals and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                old[sig] = signal.signal(sig, self._on_signal)
        try:
            self._start_threads()
            while True:
                with self._cv:
                    if self._signalled and not self._stopping:
                        self._begin_stop("signal")
                    if self._stopping and self._finished():
                        break
                    if self._stopping and self._stop_deadline is not None and \
                            time.monotonic() >= self._stop_deadline:
                        self._grace_over()
                        break
                    self._cv.wait(0.1)
        finally:
            for sig, h in old.items():
                signal.signal(sig, h)
            with self._cv:
                self._begin_stop("exit")
            for th in self._threads:
                if th.name.startswith("shardq-claim") or th.name == "shardq-writer":
                    th.join(timeout=1.0)
        if self.error is not None:
            raise self.error
        return self.stats

    def stop(self) -> None:
        """Stops the worker gracefully, from any thread: no more claims;
        jobs held but not started are released (``ready`` again at once,
        no try counted); running handlers finish within ``grace`` and their
        results are written. Returns at once; :meth:`run` returns when it
        is over."""
        with self._cv:
            self._begin_stop("stop()")

    @property
    def stopping(self) -> bool:
        """True once a stop has begun."""
        return self._stopping

    # ---- stopping --------------------------------------------------------

    def _on_signal(self, signum: int, frame: Any) -> None:
        # On the main thread, possibly inside a held lock: only a flag here.
        if self._signalled:
            os.write(2, f"shardq worker {self.name}: second signal {signum}: exiting at once; "
                        "the leases bring the jobs back\n".encode())
            os._exit(1)
        self._signalled = signum

    def _begin_stop(self, why: str) -> None:
        """With the lock held."""
        if self._stopping:
            return
        self._stopping = True
        self._stop_deadline = time.monotonic() + self.grace
        log.info("worker %s: stopping (%s): releasing unstarted jobs, %d running", self.name,
                 why, sum(self._running.values()))
        for q in self._queue.values():
            while q:
                self._to_release(q.popleft())
        for t, conn in self._claim_conns.items():
            if self._in_flight.get(t):
                conn.half_close()  # the waiting claim is answered at once
        self._cv.notify_all()

    def _finished(self) -> bool:
        """With the lock held: stopping, and nothing left to write."""
        return (not self._held and not self._release and
                not any(self._in_flight.values()))

    def _grace_over(self) -> None:
        running = sum(self._running.values())
        log.warning("worker %s: grace of %gs over with %d jobs running and %d held; their leases "
                    "bring them back", self.name, self.grace, running, len(self._held))
        for h in self._held.values():
            h.job.lease_lost.set()

    def _fatal(self, err: BaseException) -> None:
        with self._cv:
            if self.error is None:
                self.error = err
                log.error("worker %s: %s; stopping", self.name, err)
            self._begin_stop("error")

    # ---- threads ---------------------------------------------------------

    def _start_threads(self) -> None:
        def spawn(name: str, fn: Callable[..., None], *args: Any) -> None:
            th = threading.Thread(target=fn, args=args, name=name, daemon=True)
            self._threads.append(th)
            th.start()

        for t, n in self.types.items():
            self._claim_conns[t] = self.client.new_connection()
            spawn(f"shardq-claim-{t}", self._claim_loop, t)
            for k in range(n):
                spawn(f"shardq-run-{t}-{k}", self._run_loop, t)
        spawn("shardq-writer", self._write_loop)

    def _lease_end(self, lease_until_ms: Optional[int], sent_at: float) -> float:
        """The local monotonic time at which a lease the daemon answered (ms
        since the epoch, by the shard's clock) runs out."""
        if lease_until_ms is not None:
            left = lease_until_ms / 1000.0 - time.time()
            if left > 0:
                return time.monotonic() + left
            if not self._clock_warned:
                self._clock_warned = True
                log.warning("a lease the daemon answered is %.1fs past by this host's clock: the "
                            "clocks of this host and the shard disagree; assuming lease_fallback "
                            "(%gs)", -left, self.lease_fallback)
        return sent_at + self.lease_fallback

    # ---- claiming (a thread per type) --------------------------------------

    def _room(self, t: str) -> int:
        """With the lock held: how many jobs of type t a claim may ask for."""
        cap = self.types[t] + self.prefetch
        if self._unwritten[t] > max(1000, 4 * cap):
            return 0  # results pile up (the daemon answers 503): hold back
        return cap - self._running[t] - len(self._queue[t])

    def _claim_loop(self, t: str) -> None:
        conn = self._claim_conns[t]
        backoff = 0.0
        start = self.prefetch == 0
        while True:
            with self._cv:
                if backoff:
                    self._cv.wait_for(lambda: self._stopping, backoff)
                while not self._stopping and self._room(t) <= 0:
                    self._cv.wait(1.0)
                if self._stopping:
                    return
                room = self._room(t)
            try:
                conn.connect(self.client.timeout)
            except TransportError as e:
                self.stats.retries += 1
                backoff = min(max(backoff * 2, 0.5), 5.0)
                log.warning("claim %s: %s; trying again in %.1fs", t, e, backoff)
                continue
            with self._cv:
                if self._stopping:
                    return
                self._in_flight[t] = True
            sent_at = time.monotonic()
            try:
                jobs = self.client.claim({t: room}, name=self.name, wait_ms=self.wait_ms,
                                         start=start, conn=conn)
            except UnavailableError as e:
                jobs, backoff = [], e.retry_after
                self.stats.retries += 1
                log.info("claim %s: %s; trying again in %gs", t, e, backoff)
            except TransportError as e:
                jobs = []
                conn.close()
                if not self._stopping:
                    self.stats.retries += 1
                    backoff = min(max(backoff * 2, 0.5), 5.0)
                    log.warning("claim %s: %s; trying again in %.1fs", t, e, backoff)
            except ApiError as e:
                with self._cv:
                    self._in_flight[t] = False
                self._fatal(e)
                return
            else:
                backoff = 0.0
            with self._cv:
                self._in_flight[t] = False
                self.stats.claimed += len(jobs)
                for job in jobs:
                    h = _Held(job, self._lease_end(job.lease_until_ms, sent_at), started=start)
                    self._take_over(h)
                    if self._stopping:
                        self._to_release(h)  # its work has not begun
                    else:
                        self._queue[t].append(h)
                if self._stopping:
                    conn.close()
                self._cv.notify_all()

    def _take_over(self, h: _Held) -> None:
        """With the lock held: holds h, dropping an earlier run of the same
        job (its lease ran out and the job came back to us)."""
        for key, old in list(self._held.items()):
            if key[0] == h.job.id:
                self._lose(old, f"claimed again (attempt {h.job.attempt}) while this run held it")
        self._held[(h.job.id, h.job.attempt)] = h

    def _to_release(self, h: _Held) -> None:
        """With the lock held: h (not begun) goes back with the next round."""
        h.releasing = True
        self._release.append(h)

    def _lose(self, h: _Held, why: str) -> None:
        """With the lock held: the job is no longer this run's."""
        key = (h.job.id, h.job.attempt)
        if self._held.pop(key, None) is None:
            return
        h.job.lease_lost.set()
        self.stats.lost += 1
        if h.outcome is not None:
            self._unwritten[h.job.type] -= 1
        try:
            self._queue[h.job.type].remove(h)
        except ValueError:
            pass
        log.warning("job %d (attempt %d): %s; its result is dropped", h.job.id, h.job.attempt, why)
        self._cv.notify_all()

    # ---- running (limit threads per type) ----------------------------------

    def _run_loop(self, t: str) -> None:
        q = self._queue[t]
        while True:
            with self._cv:
                while not q and not self._stopping:
                    self._cv.wait()
                if not q:
                    return  # stopping: what was queued went to be released
                h = q.popleft()
                h.running = True
                self._running[t] += 1
                if not h.started:
                    h.beat_due = time.monotonic()  # its start goes with the next round
                    self._cv.notify_all()
            try:
                self.handler(h.job)
                outcome, error, permanent = "complete", "", False
            except Exception as e:  # the job failed; the worker goes on
                outcome = "fail"
                error = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
                permanent = bool(getattr(e, "permanent", False))
            with self._cv:
                self._running[t] -= 1
                h.running = False
                if (h.job.id, h.job.attempt) in self._held:
                    h.outcome, h.error, h.permanent = outcome, error[:2000], permanent
                    self._unwritten[t] += 1
                self._cv.notify_all()

    # ---- writing (one thread) ----------------------------------------------

    def _write_loop(self) -> None:
        conn = self.client.new_connection()
        backoff = 0.0
        while True:
            with self._cv:
                if backoff:
                    self._cv.wait(backoff)
                while True:
                    now = time.monotonic()
                    self._expire(now)
                    work = self._collect(now)
                    if any(work.values()):
                        break
                    if self._stopping and self._finished():
                        conn.close()
                        return
                    self._cv.wait(self._next_due(now))
            backoff = 0.0
            try:
                for kind in ("release", "complete", "fail", "heartbeat"):
                    if work[kind]:
                        self._send(conn, kind, work[kind])
            except TransportError as e:
                self.stats.retries += 1
                backoff = 0.5
                log.warning("%s; sending again in %gs", e, backoff)
            except (AuthError, BadRequestError, ApiError) as e:
                self._fatal(e)
                with self._cv:
                    # nothing more can be written: the leases bring the jobs back
                    for h in list(self._held.values()):
                        h.job.lease_lost.set()
                    self._held.clear()
                    self._release.clear()
                    for q in self._queue.values():
                        q.clear()
                conn.close()
                return

    def _expire(self, now: float) -> None:
        """With the lock held: runs whose lease ran out here are lost; a
        buffered job with less than half of its starting lease left is
        released rather than run (so no run starts near its lease's end)."""
        for h in list(self._held.values()):
            if now >= h.lease_end:
                self._lose(h, "its lease ran out before a heartbeat got through")
            elif not h.running and h.outcome is None and not h.started and now >= h.half_lease_at:
                try:
                    self._queue[h.job.type].remove(h)
                except ValueError:
                    continue
                self._to_release(h)

    def _collect(self, now: float) -> Dict[str, List[_Held]]:
        """With the lock held: what this round sends."""
        work: Dict[str, List[_Held]] = {"release": [], "complete": [], "fail": [],
                                        "heartbeat": []}
        rel = [h for h in self._release if h.retry_at <= now]
        if rel:
            work["release"] = rel[:BATCH_MAX]
        for h in self._held.values():
            if h.retry_at > now or h.releasing:
                continue
            if h.outcome == "complete":
                work["complete"].append(h)
            elif h.outcome == "fail":
                work["fail"].append(h)
            elif h.beat_due <= now and (h.running or h.started):
                work["heartbeat"].append(h)
        for k in ("complete", "fail", "heartbeat"):
            del work[k][BATCH_MAX:]
        return work

    def _next_due(self, now: float) -> float:
        """With the lock held: seconds to the next heartbeat, expiry or retry
        (at most 1)."""
        due = now + 1.0
        for h in self._held.values():
            due = min(due, h.lease_end)
            if h.releasing:
                continue
            if h.retry_at > now:
                due = min(due, h.retry_at)
            elif h.outcome is None and (h.running or h.started):
                due = min(due, h.beat_due)
            elif h.outcome is None and not h.started:
                due = min(due, h.half_lease_at)
        for h in self._release:
            due = min(due, max(h.retry_at, now))
        return max(due - now, 0.001)

    def _send(self, conn: Connection, kind: str, hs: List[_Held]) -> None:
        refs: List[Dict[str, Any]] = []
        for h in hs:
            ref = h.job.ref
            if kind == "fail":
                ref = dict(ref, error=h.error, permanent=h.permanent)
            refs.append(ref)
        sent_at = time.monotonic()
        reply = self.client.fenced(kind, refs, conn=conn)
        if reply.status == 503:
            self.stats.retries += 1
            log.info("%s; sending those again in %gs", reply.error, reply.retry_after)
        with self._cv:
            for h, res in zip(hs, reply.results):
                self._apply(kind, h, res, sent_at, reply.retry_after)
            self._cv.notify_all()

    def _apply(self, kind: str, h: _Held, res: Mapping[str, Any], sent_at: float,
               retry_after: float) -> None:
        """With the lock held: one job's result of a fenced call."""
        what = res.get("result")
        key = (h.job.id, h.job.attempt)
        if what in ("unavailable", "moving", None):
            h.retry_at = time.monotonic() + retry_after
            return
        if kind == "release":
            self._release.remove(h)
            self._held.pop(key, None)
            if what == "ok":
                self.stats.released += 1
            return
        if key not in self._held:
            return  # lost meanwhile
        if what != "ok":
            self._lose(h, f"{kind} answered {what} (another worker took it after its lease, or "
                          "it was cancelled)")
            return
        if kind == "heartbeat":
            self.stats.heartbeats += 1
            h.started = True
            lease = res.get("lease_until_ms")
            h.set_lease(self._lease_end(lease if isinstance(lease, int) else None, sent_at))
            return
        del self._held[key]
        self._unwritten[h.job.type] -= 1
        if kind == "complete":
            self.stats.completed += 1
        else:
            self.stats.failed += 1
