#!/usr/bin/env python3
"""A shardq worker over HTTP (shardqd), on the Python standard library alone.

It claims jobs of the given types with long polls ("start": true, so they come
back running; a claim waits only while every type has a free slot), runs
each on a thread of its own, heartbeats each running job a third of the way
to its lease, and completes them, or fails them with the error's text.
Completions, failures and heartbeats go in batches, one call per kind per
round, on a connection of their own.

The daemon says each job's lease: the claim's lease_until_ms (the type's
starting lease) and the lease_until_ms of each ok heartbeat (now + the
type's execution_timeout). Both are milliseconds since the epoch by the
shard's clock; the worker turns them into a deadline on its own clock, so
the two clocks must roughly agree. A third of the way leaves room for a
heartbeat that has to be sent again. --lease is used only when a reply
carries no lease_until_ms (or one this host's clock already has past).

A job whose heartbeat answers lost, or whose lease runs out here before a
heartbeat is answered, is no longer this run's: another worker may run it.
The worker says so, stops heartbeating and waiting for it (a stop does not
wait for it either), and drops its result. Its handler cannot be stopped
from outside: it runs on, and keeps its slot, until it returns.

    export SHARDQ_TOKEN=...            # a token with the worker scope
    docs/examples/worker.py --types email:4,sync:2

The default handler sleeps params["ms"] milliseconds when the job has it,
raises when it has params["fail"] (the job fails with that text; with
params["permanent"] true, for good), and prints the job otherwise. Give your
own with --handler MODULE:FUNCTION: it is called with the job (a dict, as
the claim returned it); returning completes the job, raising fails it
(raise PermanentError from this module, or any exception with an attribute
permanent = True, to fail it for good).

SIGTERM or SIGINT: stop claiming (the claim in flight ends within --wait-ms;
the jobs it brings are handed back at once with POST /v1/jobs/release, as
their work has not begun), let the running jobs finish within --grace, write
their results, exit 0. A second signal exits at once (exit 1); the leases of
the jobs left bring them back to another worker.

Exit codes: 0 after a clean stop; 1 when stopped at once or when jobs were
still running at the end of --grace; 2 a bad command line; 3 the daemon
refused the worker's requests (a bad token, a missing scope, a bad request):
the message names the daemon's error code.

See docs/http.md for the API.
"""

import argparse
import http.client
import importlib
import json
import os
import signal
import socket
import sys
import threading
import time
import urllib.parse

PROG = "worker"
BATCH_MAX = 10000  # references per call (the API's limit)


def log(msg):
    print(f"{PROG}: {msg}", file=sys.stderr, flush=True)


class PermanentError(Exception):
    """Raised by a handler: fail the job for good (no retry)."""

    permanent = True


class TransportError(Exception):
    """No answer from shardqd (connection refused, reset, timed out)."""


class ApiError(Exception):
    """shardqd answered with an error status."""

    def __init__(self, what, status, body):
        self.status = status
        err = body.get("error") if isinstance(body, dict) else None
        if isinstance(err, dict):
            self.code = err.get("code", "?")
            self.message = err.get("message", "")
        else:
            self.code = "?"
            self.message = str(body)[:500]
        super().__init__(f"{what}: shardqd answered {status} {self.code}: {self.message}")


class Response:
    def __init__(self, status, body, headers):
        self.status = status
        self.body = body
        self.headers = headers

    def retry_after(self, default=1.0):
        try:
            return float(self.headers.get("Retry-After", default))
        except ValueError:
            return default


class Client:
    """One kept-alive connection to shardqd; use one per thread."""

    def __init__(self, url, token, timeout):
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise SystemExit(f"{PROG}: --url {url!r}: expected http://HOST:PORT or https://HOST:PORT")
        self.https = u.scheme == "https"
        self.host = u.hostname
        self.port = u.port or (443 if self.https else 80)
        self.base = u.path.rstrip("/")
        self.url = url
        self.token = token
        self.timeout = timeout
        self.conn = None

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def request(self, method, path, body=None, timeout=None):
        data = None if body is None else json.dumps(body).encode()
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        for _ in range(2):
            fresh = self.conn is None
            if fresh:
                cls = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
                self.conn = cls(self.host, self.port, timeout=timeout or self.timeout)
            elif self.conn.sock is not None:
                self.conn.sock.settimeout(timeout or self.timeout)
            try:
                self.conn.request(method, self.base + path, body=data, headers=headers)
                resp = self.conn.getresponse()
                raw = resp.read()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as e:
                self.close()
                if fresh:
                    raise TransportError(f"{method} {path}: {self.url}: {e}") from None
                # The daemon closed a kept-alive connection that sat idle
                # (request_timeout): open a new one and send again.
                continue
            except (OSError, http.client.HTTPException) as e:
                self.close()
                raise TransportError(f"{method} {path}: {self.url}: {e or type(e).__name__}") from None
            if resp.will_close:
                self.close()
            ctype = resp.getheader("Content-Type", "")
            if ctype.startswith("application/json"):
                try:
                    parsed = json.loads(raw)
                except ValueError:
                    parsed = raw.decode("utf-8", "replace")
            else:
                parsed = raw.decode("utf-8", "replace")
            return Response(resp.status, parsed, resp.headers)
        raise TransportError(f"{method} {path}: {self.url}: the connection closed twice")


def default_handler(job):
    params = job.get("params") or {}
    if isinstance(params.get("ms"), (int, float)):
        time.sleep(params["ms"] / 1000.0)
    if "fail" in params:
        err = PermanentError if params.get("permanent") else RuntimeError
        raise err(str(params["fail"]))
    if "ms" not in params:
        print(f"job {job['id']} ({job['type']}, attempt {job['attempt']}): "
              f"{json.dumps(params)}", flush=True)


def load_handler(spec):
    if not spec:
        return default_handler
    mod, _, fn = spec.partition(":")
    if not fn:
        raise SystemExit(f"{PROG}: --handler {spec!r}: expected MODULE:FUNCTION")
    sys.path.insert(0, os.getcwd())
    try:
        return getattr(importlib.import_module(mod), fn)
    except (ImportError, AttributeError) as e:
        raise SystemExit(f"{PROG}: --handler {spec!r}: {e}")


class Held:
    """A job this worker holds, from its claim to its written result."""

    __slots__ = ("job", "ref", "lease_end", "beat_due", "lost", "outcome", "error", "permanent",
                 "sent")

    def __init__(self, job, lease_end):
        self.job = job
        self.ref = {"id": job["id"], "attempt": job["attempt"], "worker": job["worker"]}
        self.set_lease(lease_end)
        self.lost = False
        self.outcome = None  # None while it runs; then "complete" or "fail"
        self.error = ""
        self.permanent = False
        self.sent = False  # its result was sent at least once

    def set_lease(self, lease_end):
        """lease_end: when the lease runs out (local monotonic clock). The
        next heartbeat is due a third of the way there."""
        now = time.monotonic()
        self.lease_end = lease_end
        self.beat_due = now + max(lease_end - now, 0.0) / 3.0


class Worker:
    def __init__(self, args, handler):
        self.args = args
        self.handler = handler
        self.types = args.types  # {type: concurrency}
        self.lock = threading.Condition()
        self.held = {}  # (id, attempt) -> Held
        self.adrift = {}  # (id, attempt) -> Held: lost, its handler still running
        self.stopping = False
        self.fatal = None
        self.counts = {"done": 0, "failed": 0, "permanent": 0, "lost": 0}
        self.clock_warned = False
        timeout = max(60.0, args.wait_ms / 1000.0 + 40.0)
        self.claimer = Client(args.url, args.token, timeout)
        self.writer = Client(args.url, args.token, 60.0)

    # ---- claiming (main thread) ----

    def lease_end(self, lease_until_ms, sent_at):
        """The local monotonic time at which a lease the daemon answered
        runs out. lease_until_ms is by the shard's clock, read here against
        this host's. Without it (or with one already past here, which means
        the two clocks disagree), --lease counted from sent_at, when the
        call that set the lease was sent."""
        if isinstance(lease_until_ms, int) and not isinstance(lease_until_ms, bool):
            left = lease_until_ms / 1000.0 - time.time()
            if left > 0:
                return time.monotonic() + left
            if not self.clock_warned:
                self.clock_warned = True
                log(f"a lease the daemon answered is {-left:.1f}s past by this host's clock: "
                    "the clocks of this host and the shard disagree; using --lease instead")
        return sent_at + self.args.lease

    def lose(self, h, why):
        """With the lock held: the job is no longer this run's. Stop
        heartbeating it and waiting for its result."""
        if h.lost:
            return
        h.lost = True
        key = (h.job["id"], h.job["attempt"])
        self.held.pop(key, None)
        if h.outcome is None:
            self.adrift[key] = h  # keeps its slot until the handler returns
        self.counts["lost"] += 1
        log(f"job {h.job['id']} (attempt {h.job['attempt']}): {why}. Not waiting for it: "
            "its result will be dropped")
        self.lock.notify_all()

    def free_slots(self):
        used = {t: 0 for t in self.types}
        for h in list(self.held.values()) + list(self.adrift.values()):
            used[h.job["type"]] = used.get(h.job["type"], 0) + 1
        return {t: n - used[t] for t, n in self.types.items() if n - used[t] > 0}

    def claim_loop(self):
        backoff = 0.0
        idle_wait = 0.0
        while True:
            with self.lock:
                if backoff:
                    self.lock.wait_for(lambda: self.stopping, backoff)
                if idle_wait:
                    # Woken early when a slot frees (notify_all).
                    self.lock.wait(idle_wait)
                while not self.stopping and not self.free_slots():
                    self.lock.wait(1.0)
                if self.stopping:
                    return
                free = self.free_slots()
            # Long-poll only when the claim can take every type: a claim that
            # waits for one type's jobs would hold up the others' claims as
            # their slots free. Else claim what is there now, and look again
            # when a slot frees or after half a second.
            every_type = len(free) == len(self.types)
            body = {
                "worker": self.args.name,
                "types": [{"type": t, "limit": n} for t, n in free.items()],
                "wait_ms": self.args.wait_ms if every_type else 0,
                "start": True,
            }
            claimed_at = time.monotonic()
            try:
                r = self.claimer.request("POST", "/v1/claim", body)
            except TransportError as e:
                log(f"claim: {e}; trying again")
                backoff = min(max(backoff * 2, 0.5), 5.0)
                continue
            if r.status == 503:
                log(str(ApiError("claim", r.status, r.body)) + "; trying again")
                backoff = r.retry_after()
                continue
            if r.status != 200:
                # 400/401/403/...: this request will never succeed as it is.
                self.stop(fatal=ApiError("claim", r.status, r.body))
                return
            backoff = 0.0
            jobs = r.body.get("jobs", [])
            idle_wait = 0.5 if not jobs and not every_type else 0.0
            with self.lock:
                stopping = self.stopping
            if stopping and jobs:
                # Stopped while the claim waited: these jobs have not begun, so
                # they go back to ready at once, with no try counted.
                self.release(jobs)
                return
            with self.lock:
                for job in jobs:
                    h = Held(job, self.lease_end(job.get("lease_until_ms"), claimed_at))
                    for old in list(self.held.values()):
                        if old.job["id"] == job["id"]:
                            # Claimed again while we still hold it: the lease of
                            # the earlier run ran out before its heartbeat.
                            self.lose(old, f"claimed again (attempt {job['attempt']}) while "
                                           "this run still holds it: its lease ran out")
                    self.held[(job["id"], job["attempt"])] = h
                    threading.Thread(target=self.run, args=(h,), daemon=True).start()
            if self.args.verbose and jobs:
                log(f"claimed {len(jobs)} jobs")

    def release(self, jobs):
        refs = [{"id": j["id"], "attempt": j["attempt"], "worker": j["worker"]} for j in jobs]
        try:
            r = self.claimer.request("POST", "/v1/jobs/release", {"jobs": refs})
        except TransportError as e:
            log(f"release: {e}; their leases bring the {len(refs)} jobs back")
            return
        if r.status == 200:
            log(f"released {len(refs)} jobs claimed as the worker stopped")
        else:
            log(str(ApiError("release", r.status, r.body)) + "; their leases bring them back")

    # ---- running (one thread per job) ----

    def run(self, h):
        try:
            self.handler(h.job)
            outcome, error, permanent = "complete", "", False
        except Exception as e:  # the job failed; the worker goes on
            outcome, error = "fail", (str(e) or type(e).__name__)
            permanent = bool(getattr(e, "permanent", False))
        with self.lock:
            if h.lost:
                # No longer ours (see lose()): drop the result, free the slot.
                self.adrift.pop((h.job["id"], h.job["attempt"]), None)
                self.lock.notify_all()
                return
            h.outcome, h.error, h.permanent = outcome, error[:2000], permanent
            self.lock.notify_all()

    # ---- writing results and heartbeats (writer thread) ----

    def fenced(self, what, items):
        """Sends one fenced call in chunks; returns the result objects in
        input order ({"result": None} for the items whose call got no usable
        answer, {"result": "dropped"} for those refused) and the longest
        Retry-After seen."""
        out, wait = [], 0.0
        for i in range(0, len(items), BATCH_MAX):
            chunk = items[i:i + BATCH_MAX]
            try:
                r = self.writer.request("POST", f"/v1/jobs/{what}", {"jobs": chunk})
            except TransportError as e:
                log(f"{what}: {e}; sending again")
                out.extend([{"result": None}] * len(chunk))
                wait = max(wait, 1.0)
                continue
            results = r.body.get("results") if isinstance(r.body, dict) else None
            if r.status in (200, 409, 503) and isinstance(results, list) and len(results) == len(chunk):
                if r.status == 503:
                    log(str(ApiError(what, r.status, r.body)))
                    wait = max(wait, r.retry_after())
                out.extend(res if isinstance(res, dict) else {"result": None} for res in results)
            elif r.status == 503:
                log(str(ApiError(what, r.status, r.body)) + "; sending again")
                out.extend([{"result": None}] * len(chunk))
                wait = max(wait, r.retry_after())
            elif r.status in (401, 403):
                self.stop(fatal=ApiError(what, r.status, r.body))
                out.extend([{"result": "dropped"}] * len(chunk))
            else:
                # A request the daemon refuses as it is: sending it again would
                # not help. The jobs' leases bring them back.
                log(str(ApiError(what, r.status, r.body)) + f"; {len(chunk)} jobs dropped")
                out.extend([{"result": "dropped"}] * len(chunk))
        return out, wait

    def write_round(self):
        now = time.monotonic()
        with self.lock:
            for h in list(self.held.values()):
                if h.outcome is None and now >= h.lease_end:
                    self.lose(h, "its lease ran out by this host's clock before a heartbeat "
                                 "was answered: another worker may run it now")
            finished = [h for h in self.held.values() if h.outcome and not h.lost]
            due = [h for h in self.held.values()
                   if h.outcome is None and not h.lost and now >= h.beat_due]
        wait = 0.0
        if due:
            sent_at = time.monotonic()
            out, w = self.fenced("heartbeat", [h.ref for h in due])
            wait = max(wait, w)
            with self.lock:
                for h, res in zip(due, out):
                    r = res.get("result")
                    if r == "ok":
                        h.set_lease(self.lease_end(res.get("lease_until_ms"), sent_at))
                    elif r in ("lost", "not_found"):
                        self.lose(h, f"heartbeat {r}: its lease ran out and another worker "
                                     "may hold it, or it was cancelled")
                    # moving, unavailable, None: sent again next round, while
                    # the lease lasts (about two thirds of it are left).
        for kind in ("complete", "fail"):
            batch = [h for h in finished if h.outcome == kind]
            if not batch:
                continue
            if kind == "complete":
                items = [h.ref for h in batch]
            else:
                items = [dict(h.ref, error=h.error, permanent=h.permanent) for h in batch]
            out, w = self.fenced(kind, items)
            wait = max(wait, w)
            with self.lock:
                for h, res in zip(batch, out):
                    r = res.get("result")
                    if r in ("ok", "lost", "not_found", "dropped"):
                        self.held.pop((h.job["id"], h.job["attempt"]), None)
                    if r == "ok":
                        if kind == "complete":
                            self.counts["done"] += 1
                        else:
                            self.counts["failed"] += 1
                            self.counts["permanent"] += h.permanent
                    elif r in ("lost", "not_found"):
                        self.counts["lost"] += 1
                        why = ("an earlier send may have been applied" if h.sent
                               else "the lease ran out, or it was cancelled")
                        log(f"job {h.job['id']}: {kind} {r} ({why})")
                    elif r != "dropped":
                        # moving, unavailable or no answer: sent again next
                        # round; whether this send was applied is not known.
                        h.sent = True
                self.lock.notify_all()
        return wait

    def writer_loop(self):
        while True:
            wait = self.write_round()
            with self.lock:
                if self.stopping and not self.held:
                    return
                self.lock.wait(max(wait, self.args.tick))

    # ---- stopping ----

    def stop(self, fatal=None):
        with self.lock:
            if fatal is not None and self.fatal is None:
                self.fatal = fatal
                log(str(fatal))
            self.stopping = True
            self.lock.notify_all()

    def run_all(self):
        w = threading.Thread(target=self.writer_loop, name="writer", daemon=True)
        w.start()
        self.claim_loop()
        with self.lock:
            n = len(self.held)
        if n:
            log(f"stopping: waiting for {n} jobs to finish (at most {self.args.grace:g}s)")
        w.join(self.args.grace)
        with self.lock:
            left = len(self.held)
            adrift = len(self.adrift)
            c = dict(self.counts)
        log(f"done {c['done']}, failed {c['failed']} ({c['permanent']} for good), lost {c['lost']}")
        if adrift:
            log(f"{adrift} handlers of lost jobs were still running; their results are dropped")
        if left:
            log(f"{left} jobs still held after --grace: their leases bring them back")
            return 1
        return 3 if self.fatal else 0


def parse_types(text, concurrency):
    types = {}
    for part in text.split(","):
        name, _, n = part.strip().partition(":")
        if not name:
            raise argparse.ArgumentTypeError(f"--types {text!r}: expected TYPE[:N],...")
        try:
            k = int(n) if n else concurrency
        except ValueError:
            raise argparse.ArgumentTypeError(f"--types: {n!r} is not a number")
        if not 1 <= k <= 10000:
            raise argparse.ArgumentTypeError(f"--types: {name}:{k}: N must be 1..10000")
        types[name] = k
    return types


def main():
    p = argparse.ArgumentParser(
        description="Claims and runs shardq jobs through shardqd (docs/http.md).")
    p.add_argument("--url", default="http://127.0.0.1:8080", help="shardqd's address (%(default)s)")
    p.add_argument("--token", default=os.environ.get("SHARDQ_TOKEN"),
                   help="a token with the worker scope (default: $SHARDQ_TOKEN)")
    p.add_argument("--types", required=True,
                   help="TYPE[:N],...: the types to run and how many of each at once")
    p.add_argument("--concurrency", type=int, default=4,
                   help="N for a type given without one (%(default)s)")
    p.add_argument("--name", default=f"py-{socket.gethostname()}-{os.getpid()}",
                   help="this worker's name in the daemon's records (%(default)s)")
    p.add_argument("--wait-ms", type=int, default=5000,
                   help="how long a claim waits for jobs (%(default)s; the daemon cuts it to claim_wait_max)")
    p.add_argument("--lease", type=float, default=30.0,
                   help="seconds: the lease assumed when a reply carries no lease_until_ms (or one "
                        "already past by this host's clock); set it to the shortest of the types' "
                        "starting_timeout and execution_timeout (%(default)s)")
    p.add_argument("--grace", type=float, default=30.0,
                   help="seconds running jobs may take to finish after a signal (%(default)s)")
    p.add_argument("--tick", type=float, default=0.1,
                   help="seconds between rounds of results and heartbeats (%(default)s)")
    p.add_argument("--handler", help="MODULE:FUNCTION called with each job (default: sleep/print)")
    p.add_argument("-v", "--verbose", action="store_true")
    args = p.parse_args()
    if not args.token:
        p.error("no token: give --token or set SHARDQ_TOKEN")
    if args.lease <= 0 or args.grace < 0 or args.tick <= 0 or args.wait_ms < 0:
        p.error("--lease and --tick must be > 0, --grace and --wait-ms >= 0")
    try:
        args.types = parse_types(args.types, args.concurrency)
    except argparse.ArgumentTypeError as e:
        p.error(str(e))

    worker = Worker(args, load_handler(args.handler))
    signals = {"n": 0}

    def on_signal(signum, frame):
        signals["n"] += 1
        if signals["n"] > 1:
            log("second signal: exiting at once; the leases bring the jobs back")
            os._exit(1)
        log(f"{signal.Signals(signum).name}: stopping (a second signal exits at once)")
        worker.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    log(f"claiming {', '.join(f'{t}:{n}' for t, n in args.types.items())} from {args.url} "
        f"as {args.name}")
    sys.exit(worker.run_all())


if __name__ == "__main__":
    main()
