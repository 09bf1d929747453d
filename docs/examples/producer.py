#!/usr/bin/env python3
"""Enqueues shardq jobs through shardqd (POST /v1/jobs), on the Python
standard library alone, and prints a summary of the outcomes.

    export SHARDQ_TOKEN=...            # a token with the producer scope
    docs/examples/producer.py --type email --count 10000 --params '{"ms":20}'
    docs/examples/producer.py --type email --count 100 --key-prefix user:
    docs/examples/producer.py --file jobs.jsonl --batch 500

A --file holds one JSON object per line, in the form of the API's jobs
({"type":"email","key":"user:42","params":{...},"priority":0,"delay_ms":0,
"delay_tolerance_ms":1000,"max_attempts":5}, or "run_at_ms":<unix ms>
instead of "delay_ms"; only "type" is required); blank lines are skipped.
The whole file is read and checked as JSON first, then sent in batches; the
daemon checks each job's fields, and one it refuses stops the run with its
line named (nothing of that batch is written).

When a shard fails during a batch (503), the jobs the daemon reports as
not_written (or unknown, which only a job with a key can be, and which its
key makes safe to send again) are sent again after Retry-After, up to
--retries times; a 503 without results (the daemon is stopping) wrote
nothing, and the whole batch is sent again the same way. A batch that gets
no answer at all is not sent again: whether it was written is not known,
and a job without a key would be enqueued twice.

Exit codes: 0 every job written; 1 some jobs not written (the message says
which); 2 a bad command line or input file; 3 the daemon refused the
request (the message names its error code).

See docs/http.md for the API.
"""

import argparse
import http.client
import json
import os
import sys
import time
import urllib.parse

PROG = "producer"


def log(msg):
    print(f"{PROG}: {msg}", file=sys.stderr, flush=True)


class TransportError(Exception):
    """No answer from shardqd; sent: whether the request may have reached it."""

    def __init__(self, msg, sent):
        super().__init__(msg)
        self.sent = sent


def api_error(status, body):
    err = body.get("error") if isinstance(body, dict) else None
    if isinstance(err, dict):
        return f"shardqd answered {status} {err.get('code', '?')}: {err.get('message', '')}"
    # A few errors come from libevent, with an HTML body: 413 for a body over
    # the daemon's max_body, 400 for headers over max_headers.
    if status == 413:
        return ("shardqd answered 413: the request is larger than the daemon's max_body; "
                "use a smaller --batch (or smaller params)")
    return f"shardqd answered {status} (not a JSON error): {' '.join(str(body).split())[:200]}"


class Client:
    """One kept-alive connection to shardqd. An enqueue is never sent twice
    by this class: a connection idle for a while is replaced before use
    instead (the daemon closes idle ones after its request_timeout)."""

    IDLE_REOPEN = 5.0

    def __init__(self, url, token, timeout=60.0):
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise SystemExit(f"{PROG}: --url {url!r}: expected http://HOST:PORT or https://HOST:PORT")
        self.cls = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
        self.host, self.port = u.hostname, u.port or (443 if u.scheme == "https" else 80)
        self.base = u.path.rstrip("/")
        self.url, self.token, self.timeout = url, token, timeout
        self.conn, self.last_used = None, 0.0

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def request(self, method, path, body=None):
        if self.conn is not None and time.monotonic() - self.last_used > self.IDLE_REOPEN:
            self.close()
        if self.conn is None:
            self.conn = self.cls(self.host, self.port, timeout=self.timeout)
            try:
                self.conn.connect()
            except OSError as e:
                self.close()
                raise TransportError(f"cannot connect to shardqd at {self.url}: {e}", False) from None
        data = None if body is None else json.dumps(body).encode()
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        try:
            self.conn.request(method, self.base + path, body=data, headers=headers)
            resp = self.conn.getresponse()
            raw = resp.read()
        except (OSError, http.client.HTTPException) as e:
            self.close()
            raise TransportError(f"{method} {path}: {self.url}: {e or type(e).__name__}", True) from None
        self.last_used = time.monotonic()
        if resp.will_close:
            self.close()
        try:
            parsed = json.loads(raw)
        except ValueError:
            parsed = raw.decode("utf-8", "replace")
        return resp.status, parsed, resp.headers


def read_jobs(path):
    """[(line number, job)] from a JSONL file, or exits naming the bad line."""
    f = sys.stdin if path == "-" else None
    try:
        if f is None:
            f = open(path, encoding="utf-8")
        out = []
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                job = json.loads(line)
            except ValueError as e:
                raise SystemExit(f"{PROG}: {path}:{n}: not JSON: {e}")
            if not isinstance(job, dict) or not isinstance(job.get("type"), str):
                raise SystemExit(f"{PROG}: {path}:{n}: expected a JSON object with a \"type\"")
            out.append((n, job))
        return out
    except (OSError, UnicodeDecodeError) as e:
        raise SystemExit(f"{PROG}: {path}: {e}")


def make_jobs(args):
    params = None
    if args.params is not None:
        try:
            params = json.loads(args.params)
        except ValueError as e:
            raise SystemExit(f"{PROG}: --params: not JSON: {e}")
        if not isinstance(params, dict):
            raise SystemExit(f"{PROG}: --params: expected a JSON object")
    out = []
    for i in range(args.count):
        job = {"type": args.type}
        if args.key_prefix is not None:
            job["key"] = f"{args.key_prefix}{i}"
        if params is not None:
            job["params"] = params
        if args.priority is not None:
            job["priority"] = args.priority
        if args.delay_ms is not None:
            job["delay_ms"] = args.delay_ms
        out.append((i + 1, job))
    return out


def where(numbers, unit):
    """'lines 3-5, 9' from [3, 4, 5, 9]."""
    spans, start, prev = [], None, None
    for n in numbers:
        if start is None:
            start = prev = n
        elif n == prev + 1:
            prev = n
        else:
            spans.append((start, prev))
            start = prev = n
    if start is not None:
        spans.append((start, prev))
    text = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in spans[:20])
    if len(spans) > 20:
        text += ", ..."
    return f"{unit}s {text}" if len(numbers) > 1 else f"{unit} {text}"


def main():
    p = argparse.ArgumentParser(description="Enqueues shardq jobs through shardqd (docs/http.md).")
    p.add_argument("--url", default="http://127.0.0.1:8080", help="shardqd's address (%(default)s)")
    p.add_argument("--token", default=os.environ.get("SHARDQ_TOKEN"),
                   help="a token with the producer scope (default: $SHARDQ_TOKEN)")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--file", help="a JSONL file of jobs, one object per line ('-': stdin)")
    src.add_argument("--type", help="enqueue --count jobs of this type")
    p.add_argument("--count", type=int, default=1, help="with --type: how many jobs (%(default)s)")
    p.add_argument("--params", help="with --type: the params of every job (a JSON object)")
    p.add_argument("--key-prefix", help="with --type: job i gets the key PREFIXi (default: no key)")
    p.add_argument("--priority", type=int, help="with --type: the jobs' priority")
    p.add_argument("--delay-ms", type=int, help="with --type: run no earlier than this from now")
    p.add_argument("--batch", type=int, default=1000, help="jobs per request, 1..10000 (%(default)s)")
    p.add_argument("--retries", type=int, default=5,
                   help="times to send again the jobs a failing shard did not write (%(default)s)")
    p.add_argument("--results", action="store_true",
                   help="print each job's result as a JSON line on stdout")
    args = p.parse_args()
    if not args.token:
        p.error("no token: give --token or set SHARDQ_TOKEN")
    if not 1 <= args.batch <= 10000:
        p.error("--batch must be 1..10000")
    if args.count < 0 or args.retries < 0:
        p.error("--count and --retries must be >= 0")

    unit = "line" if args.file else "job"
    jobs = read_jobs(args.file) if args.file else make_jobs(args)
    client = Client(args.url, args.token)
    counts = {}
    not_written = []  # numbers (lines or jobs) given up on
    written = 0
    t0 = time.monotonic()
    summary_out = sys.stderr if args.results else sys.stdout

    for b in range(0, len(jobs), args.batch):
        pending = jobs[b:b + args.batch]
        tries = 0
        while pending:
            first, last = pending[0][0], pending[-1][0]
            try:
                status, body, headers = client.request("POST", "/v1/jobs",
                                                       {"jobs": [j for _, j in pending]})
            except TransportError as e:
                log(f"{e}")
                span = where([n for n, _ in pending], unit)
                if e.sent:
                    log(f"no answer for {span}: whether these jobs were written is not known "
                        f"(jobs with a key may be sent again safely); {written} jobs before "
                        f"them were written; stopping")
                else:
                    log(f"{span} not sent; {written} jobs before them were written; stopping")
                return finish(summary_out, counts, written, t0, 1)
            results = body.get("results") if isinstance(body, dict) else None
            if status == 503 and results is None and isinstance(body, dict):
                # Refused before anything was sent to a shard (the daemon is
                # stopping): nothing of the batch was written.
                results = [{"outcome": "not_written"} for _ in pending]
            if status == 200 or (status == 503 and isinstance(results, list)
                                 and len(results) == len(pending)):
                again = []
                for (n, job), res in zip(pending, results):
                    outcome = res.get("outcome")
                    if outcome in ("not_written", "unknown"):
                        again.append((n, job))
                        continue
                    counts[outcome] = counts.get(outcome, 0) + 1
                    written += 1
                    if args.results:
                        print(json.dumps(dict(res, **{unit: n})), flush=True)
                if status == 200:
                    break
                tries += 1
                log(f"{api_error(status, body)}")
                if tries > args.retries:
                    log(f"{where([n for n, _ in again], unit)} not written after "
                        f"{args.retries} retries: enqueue them again later")
                    not_written.extend(n for n, _ in again)
                    break
                try:
                    wait = float(headers.get("Retry-After", "1"))
                except ValueError:
                    wait = 1.0
                log(f"sending {len(again)} jobs again in {wait:g}s")
                time.sleep(wait)
                pending = again
                continue
            if status == 400 and isinstance(body, dict) and \
                    body.get("error", {}).get("code") == "bad_job":
                msg = body["error"].get("message", "")
                # "job N: ..." names the job by its index in the batch's
                # "jobs", counted from 0.
                head, _, rest = msg.partition(": ")
                try:
                    n = pending[int(head.split()[1])][0]
                    msg = f"{unit} {n}: {rest}"
                except (IndexError, ValueError):
                    pass
                log(f"shardqd answered 400 bad_job: {msg}")
                span = f"{unit}s {first}-{last}" if first != last else f"{unit} {first}"
                log(f"nothing of {span} was written; {written} jobs before them were")
                return finish(summary_out, counts, written, t0, 3)
            log(api_error(status, body))
            if status >= 500:
                log(f"whether {where([n for n, _ in pending], unit)} were written is not "
                    f"known (jobs with a key may be sent again safely); stopping")
                return finish(summary_out, counts, written, t0, 1)
            return finish(summary_out, counts, written, t0, 3)

    return finish(summary_out, counts, written, t0, 1 if not_written else 0)


def finish(out, counts, written, t0, code):
    secs = max(time.monotonic() - t0, 1e-9)
    parts = ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none"
    print(f"enqueued {written} jobs in {secs:.2f}s ({written / secs:.0f}/s): {parts}",
          file=sys.stderr if code else out, flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
