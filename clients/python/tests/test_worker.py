"""The worker, in real processes, against a real shardqd and real shards."""

import collections
import logging
import os
import signal
import sys
import threading
import time

import shardq
from conftest import TOKENS, Proxy, records, wait_for, worker_proc


def enqueue(cluster, type_, n, params=None):
    rs = shardq.Producer(cluster.producer_client, batch_size=1000).enqueue(
        [shardq.NewJob(type_, params) for _ in range(n)])
    assert all(r.inserted for r in rs)
    return [r.id for r in rs]


def test_a_killed_worker_loses_nothing(cluster, tmp_path):
    ids = enqueue(cluster, "kill", 200)
    rec1, rec2 = str(tmp_path / "w1"), str(tmp_path / "w2")
    w1 = worker_proc(cluster, "kill", 4, rec1, sleep_ms=30)
    wait_for("the first worker runs jobs", lambda: len(records(rec1)), lambda n: n >= 40)
    w1.send_signal(signal.SIGKILL)
    w1.wait()
    killed_runs = records(rec1)
    held = cluster.live("kill", "running") + cluster.live("kill", "starting")
    assert held > 0, "the killed worker held no job: nothing was tested"

    w2 = worker_proc(cluster, "kill", 8, rec2, sleep_ms=5)
    try:
        wait_for("every job completed after the kill", lambda: cluster.completed("kill"),
                 lambda n: n == 200)
        assert cluster.live("kill") == 0
    finally:
        w2.send_signal(signal.SIGTERM)
        assert w2.wait(60) == 0

    # every acknowledged job is completed, through the daemon's view too
    for i in ids:
        assert cluster.producer_client.get_job(i).status == "completed", i
    # the jobs the dead worker held came back (a later attempt) and ran again
    ran_again = {i for i, _ in killed_runs} & {i for i, _ in records(rec2)}
    assert ran_again, "no job of the killed worker ran again"
    print(f"killed worker: {len(killed_runs)} runs, {held} jobs held at the kill, "
          f"{len(ran_again)} of its jobs ran again after their lease")


def test_twenty_workers_never_run_a_job_twice(cluster, tmp_path):
    n = 3000
    recs = [str(tmp_path / f"w{k}") for k in range(20)]
    procs = [worker_proc(cluster, "many", 4, r, wait_ms=1000) for r in recs]
    try:
        time.sleep(0.5)  # let them start (interpreter start-up) before the clock runs
        t0 = time.monotonic()
        ids = enqueue(cluster, "many", n)
        wait_for(f"{n} jobs completed by 20 workers", lambda: cluster.completed("many"),
                 lambda c: c == n)
        took = time.monotonic() - t0
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        codes = [p.wait(60) for p in procs]
    assert codes == [0] * 20
    runs = [run for r in recs for run in records(r)]
    counts = collections.Counter(i for i, _ in runs)
    twice = {i: c for i, c in counts.items() if c > 1}
    assert not twice, f"{len(twice)} jobs ran more than once: {list(twice.items())[:10]}"
    assert set(counts) == set(ids) and len(runs) == n
    assert cluster.live("many") == 0
    busy = sum(1 for r in recs if records(r))
    print(f"20 worker processes: {n} jobs in {took:.2f}s ({n / took:.0f} jobs/s, enqueue "
          f"included), {busy} of them ran jobs, none twice")


def test_sigterm_releases_unstarted_jobs_at_once(cluster, tmp_path):
    # type term: 60 s leases, so a job not released would stay held a minute
    ids = enqueue(cluster, "term", 20, {"ms": 1500})
    rec = str(tmp_path / "w")
    w = worker_proc(cluster, "term", 2, rec, prefetch=10)
    try:
        wait_for("2 running and 10 prefetched",
                 lambda: (len(records(rec)), cluster.live("term", "starting") +
                          cluster.live("term", "running")),
                 lambda v: v == (2, 12))
        t0 = time.monotonic()
        w.send_signal(signal.SIGTERM)
        # the 10 prefetched jobs are ready again at once: the 8 never
        # claimed plus these 10
        wait_for("the prefetched jobs released", lambda: cluster.live("term", "ready"),
                 lambda r: r == 18)
        released_in = time.monotonic() - t0
        assert w.wait(60) == 0
    finally:
        if w.poll() is None:
            w.kill()
    assert released_in < 10, released_in  # against a 60 s lease
    assert cluster.completed("term") == 2  # the two running ones finished
    started = {i for i, _ in records(rec)}
    for i in ids:
        j = cluster.producer_client.get_job(i)
        if i in started:
            assert j.status == "completed"
        else:
            assert j.status == "ready" and j.tries == 0, j  # no try counted
    log = open(rec + ".log").read()
    assert "released=10" in log, log[-2000:]
    print(f"SIGTERM: 10 prefetched jobs ready again {released_in:.2f}s later; "
          "the 2 running completed")
    shardq.Client(cluster.url, TOKENS["producer"]).cancel(
        [i for i in ids if i not in started])


def test_503_is_retried_after_retry_after(cluster, tmp_path, caplog):
    """A second shardqd reaches s2 through a proxy that is cut: the enqueue's
    jobs for s2 are answered not_written (503, Retry-After: 1) and sent again
    until s2 is back; a worker's completions for s2 are retried the same
    way. No job is lost or written twice."""
    caplog.set_level(logging.INFO, logger="shardq")
    proxy = Proxy(cluster.ports[1])
    d = cluster.start_daemon("proxied", [cluster.ports[0], proxy.port])
    try:
        proxy.cut(True)
        pc = shardq.Client(d.url, TOKENS["producer"], timeout=60, retry_budget=60)
        threading.Timer(2.5, proxy.cut, args=(False,)).start()
        t0 = time.monotonic()
        # keyed, so that the batch spreads over both shards (a keyless batch
        # this small goes to one partition)
        rs = shardq.Producer(pc).enqueue(
            [shardq.NewJob("retry", {"i": i}, key=f"r{i}") for i in range(40)])
        took = time.monotonic() - t0
        # an "unknown" sent again would answer duplicate; none is expected
        # with s2 refusing connections, but both mean written once
        assert {r.outcome for r in rs} <= {"inserted", "duplicate"}, rs
        assert len({r.id for r in rs}) == 40
        assert {r.shard for r in rs} == {"s1", "s2"}
        assert cluster.live("retry") == 40  # each written once
        assert took >= 2.0, took  # it waited for s2
        retried = [m for m in caplog.messages if "enqueue: shardqd answered 503" in m]
        assert retried, caplog.messages
        s2_ids = {r.id for r in rs if r.shard == "s2"}

        # the worker: s2 cut while its jobs run, so their completions get 503
        ran = collections.Counter()
        cut_once = threading.Event()

        def handle(job):
            ran[job.id] += 1
            if job.shard == "s2" and not cut_once.is_set():
                cut_once.set()
                proxy.cut(True)
                threading.Timer(2.0, proxy.cut, args=(False,)).start()
            time.sleep(0.2)

        wc = shardq.Client(d.url, TOKENS["worker"], timeout=60)
        w = shardq.Worker(wc, {"retry": 8}, handle, wait_ms=500, install_signals=False)
        th = threading.Thread(target=w.run)
        th.start()
        try:
            wait_for("every job completed through the cut", lambda: cluster.completed("retry"),
                     lambda c: c == 40)
        finally:
            w.stop()
            th.join(60)
        assert not th.is_alive()
        assert cut_once.is_set() and s2_ids
        assert max(ran.values()) == 1 and len(ran) == 40, ran
        assert w.stats.completed == 40 and w.stats.lost == 0, w.stats
        assert w.stats.retries > 0, w.stats
        sent_again = [m for m in caplog.messages if m.startswith("complete: shardqd answered 503")]
        assert sent_again, [m for m in caplog.messages if "503" in m]
        print(f"503: enqueue waited {took:.1f}s for s2 ({len(retried)} retries); worker {w.stats}")
    finally:
        d.stop()
        proxy.close()


def run_worker(cluster, types, handler, until, what, **kw):
    """A Worker on a thread until until() holds (waiting on progress)."""
    w = shardq.Worker(shardq.Client(cluster.url, TOKENS["worker"]), types, handler,
                      install_signals=False, wait_ms=500, **kw)
    th = threading.Thread(target=w.run)
    th.start()
    try:
        wait_for(what, lambda: (w.stats.completed, w.stats.failed, w.stats.heartbeats,
                                w.stats.lost), lambda _: until(w))
    finally:
        w.stop()
        th.join(60)
    assert not th.is_alive()
    return w


def test_heartbeats_keep_a_run_past_its_lease_and_a_cancel_stops_it(cluster):
    # type beat: 3 s leases; each job runs 5 s
    ids = enqueue(cluster, "beat", 2, {"ms": 5000})
    enqueue_time = time.monotonic()
    victim = shardq.Producer(cluster.producer_client).enqueue_one("beat", {"cancel": True})
    stopped = threading.Event()

    def handle(job):
        if job.params.get("cancel"):
            shardq.Client(cluster.url, TOKENS["producer"]).cancel([job.id])
            if job.lease_lost.wait(30):  # the next heartbeat answers lost
                stopped.set()
            return
        time.sleep(job.params["ms"] / 1000)

    w = run_worker(cluster, {"beat": 3}, handle,
                   lambda w: w.stats.completed == 2 and w.stats.lost == 1, "runs past the lease")
    took = time.monotonic() - enqueue_time
    assert stopped.is_set()
    # a heartbeat a third of the way to each 3 s lease: about one a second
    # per job over 5 s runs
    assert w.stats.heartbeats >= 6, w.stats
    for i in ids:
        assert cluster.producer_client.get_job(i).status == "completed"
    assert cluster.producer_client.get_job(victim.id).status == "cancelled"
    print(f"heartbeats: 2 runs of 5 s on 3 s leases, {w.stats.heartbeats} heartbeats, "
          f"done in {took:.1f}s; the cancelled run saw lease_lost")


def test_failures_are_retried_or_permanent(cluster):
    rs = shardq.Producer(cluster.producer_client).enqueue([
        shardq.NewJob("fails", {"mode": "once"}), shardq.NewJob("fails", {"mode": "perm"})])
    attempts = collections.Counter()

    def handle(job):
        attempts[job.params["mode"]] += 1
        if job.params["mode"] == "perm":
            raise shardq.PermanentError("bad input: <b>not retried</b>")
        if job.tries == 1:  # its first run
            raise ValueError("flaky upstream")

    w = run_worker(cluster, {"fails": 2}, handle,
                   lambda w: w.stats.completed == 1 and w.stats.failed == 2, "fail, retry")
    assert attempts == {"once": 2, "perm": 1}, attempts
    assert cluster.producer_client.get_job(rs[0].id).status == "completed"
    assert cluster.producer_client.get_job(rs[1].id).status == "failed"
    from conftest import psql
    errs = [psql(p, cluster.db, f"SELECT last_error FROM shardq.jobs WHERE id = {rs[1].id}")
            for p in cluster.ports]
    assert "PermanentError: bad input: <b>not retried</b>" in errs, errs
