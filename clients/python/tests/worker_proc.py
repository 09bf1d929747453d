"""A worker process for the tests: runs jobs of one type, appending "ID
ATTEMPT" to --record as each run starts (one write with O_APPEND, so a
SIGKILL leaves whole lines), then sleeping --sleep-ms. Prints its stats as
the last line of stderr on a clean stop (SIGTERM)."""

import argparse
import logging
import os
import sys
import time

import shardq


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--token", required=True)
    ap.add_argument("--type", required=True)
    ap.add_argument("--limit", type=int, default=4)
    ap.add_argument("--prefetch", type=int, default=0)
    ap.add_argument("--record", required=True)
    ap.add_argument("--sleep-ms", type=int, default=0)
    ap.add_argument("--wait-ms", type=int, default=2000)
    a = ap.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"worker {os.getpid()}: %(message)s")
    fd = os.open(a.record, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def handle(job: shardq.Job) -> None:
        os.write(fd, f"{job.id} {job.attempt}\n".encode())
        ms = job.params.get("ms", a.sleep_ms)
        if ms:
            time.sleep(ms / 1000.0)

    client = shardq.Client(a.url, a.token, timeout=60)
    w = shardq.Worker(client, {a.type: a.limit}, handle, prefetch=a.prefetch, wait_ms=a.wait_ms,
                      grace=60)
    t0 = time.monotonic()
    stats = w.run()
    print(f"stats {stats} in {time.monotonic() - t0:.2f}s", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
