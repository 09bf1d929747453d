"""Real shards, a real shardqd: the cluster the client's tests run against.

Needs (run_tests.sh sets them from ctest):
  SHARDQ_TEST_PORTS  the local test shards ("25561,25562,..."; at least 2)
  SHARDQ_DAEMON      the shardqd binary
  SHARDQ_CLI         the shardq binary (for `shardq init`)
  SHARDQ_TEST_STALL  seconds without progress after which a wait fails (90)

The session makes database pyclient_<pid> on two shards, writes a config,
runs `shardq init`, starts shardqd on a free port and drops the database
at the end.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Callable, Dict, List, Optional

import pytest

import shardq

HERE = os.path.dirname(os.path.abspath(__file__))
STALL = float(os.environ.get("SHARDQ_TEST_STALL", "90"))
TOKENS = {"worker": "py-worker-token-0123456789abcdef",
          "producer": "py-producer-token-0123456789abcdef",
          "admin": "py-admin-token-0123456789abcdef"}

TYPES_INI = """
[type pt]
history = true

[type dd]
history = true

[type kill]
history = true
starting_timeout = 4s
execution_timeout = 4s

[type many]
history = true

[type term]
history = true
starting_timeout = 60s
execution_timeout = 60s

[type retry]
history = true

[type beat]
history = true
starting_timeout = 3s
execution_timeout = 3s

[type fails]
history = true
max_attempts = 2
backoff = constant
backoff_base = 100ms
"""


def need_env(name: str) -> str:
    v = os.environ.get(name)
    if not v:
        pytest.exit(f"${name} is not set: run the tests through clients/python/run_tests.sh "
                    "(ctest -R python_client)", returncode=2)
    return v


def psql(port: int, db: str, sql: str) -> str:
    """Runs sql on the shard at port; returns the output (unaligned, no
    headers)."""
    r = subprocess.run(["psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
                        "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "-d", db,
                        "-c", sql], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"psql on port {port} ({db}): {sql}: {r.stderr.strip()}")
    return r.stdout.strip()


def wait_for(what: str, progress: Callable[[], object], done: Callable[[object], bool]) -> object:
    """Waits until done(progress()) holds; fails once progress() has not
    changed for STALL seconds (never on a deadline)."""
    last, since = object(), time.monotonic()
    while True:
        v = progress()
        if done(v):
            return v
        if v != last:
            last, since = v, time.monotonic()
        elif time.monotonic() - since > STALL:
            pytest.fail(f"{what}: no progress for {STALL:.0f}s (at {v!r})")
        time.sleep(0.05)


class Daemon:
    """A shardqd process."""

    def __init__(self, ini: str, out: str) -> None:
        self.out = out
        self.log = open(out, "w")
        self.proc = subprocess.Popen([need_env("SHARDQ_DAEMON"), "-c", ini],
                                     stdout=subprocess.PIPE, stderr=self.log, text=True)
        line = ""
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], STALL)
        if ready:
            line = self.proc.stdout.readline()
        if "listening on http://" not in line:
            self.proc.kill()
            self.proc.wait()
            self.log.close()
            pytest.fail(f"shardqd did not start: {line!r}; its log:\n{open(out).read()[-3000:]}")
        self.url = line.split("listening on ", 1)[1].split()[0]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STALL)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


class Proxy:
    """A TCP proxy in front of one shard, on a port of its own. ``cut(True)``
    closes what it holds and refuses new connections (the shard cannot be
    reached); ``cut(False)`` passes them again."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.lsock = socket.socket()
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(64)
        self.port = self.lsock.getsockname()[1]
        self.refuse = False
        self.pairs: List[tuple] = []
        self.lock = threading.Lock()
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            if self.refuse:
                c.close()
                continue
            try:
                s = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                c.close()
                continue
            with self.lock:
                self.pairs.append((c, s))
            threading.Thread(target=self._pump, args=(c, s), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        try:
            while True:
                r, _, _ = select.select([a, b], [], [], 0.5)
                if self.refuse:
                    break
                for x in r:
                    data = x.recv(65536)
                    if not data:
                        raise OSError("closed")
                    (b if x is a else a).sendall(data)
        except OSError:
            pass
        finally:
            a.close()
            b.close()
            with self.lock:
                if (a, b) in self.pairs:
                    self.pairs.remove((a, b))

    def cut(self, on: bool) -> None:
        self.refuse = on
        if on:
            with self.lock:
                for a, b in list(self.pairs):
                    for x in (a, b):
                        try:
                            x.shutdown(socket.SHUT_RDWR)
                        except OSError:
                            pass

    def close(self) -> None:
        self.closed = True
        self.cut(True)
        self.lsock.close()


class Cluster:
    """Two shards, their database, a config and a shardqd."""

    def __init__(self) -> None:
        ports = [int(p) for p in need_env("SHARDQ_TEST_PORTS").split(",") if p.strip()]
        if len(ports) < 2:
            pytest.exit("SHARDQ_TEST_PORTS needs at least 2 shards", returncode=2)
        self.ports = ports[:2]
        self.db = f"pyclient_{os.getpid()}"
        self.dir = tempfile.mkdtemp(prefix="shardq-pyclient-")
        for p in self.ports:
            psql(p, "postgres", f'DROP DATABASE IF EXISTS "{self.db}" WITH (FORCE)')
            psql(p, "postgres", f'CREATE DATABASE "{self.db}"')
        self.cluster_ini = self._cluster_ini(self.ports)
        ini = self.write("shardq.ini", self.cluster_ini)
        r = subprocess.run([need_env("SHARDQ_CLI"), "-c", ini, "init"], capture_output=True,
                           text=True)
        if r.returncode != 0:
            pytest.fail(f"shardq init: exit {r.returncode}: {r.stderr}")
        self.daemon = self.start_daemon("shardqd", self.ports)
        self.url = self.daemon.url
        self.producer_client = shardq.Client(self.url, TOKENS["producer"], timeout=60)
        self.admin_client = shardq.Client(self.url, TOKENS["admin"], timeout=60)

    def _cluster_ini(self, ports: List[int]) -> str:
        text = "[cluster]\npartitions = 16\nmaintain_interval = 0\n\n"
        for i, p in enumerate(ports):
            text += (f"[shard s{i + 1}]\ndsn = host=127.0.0.1 port={p} dbname={self.db} "
                     "user=postgres\n\n")
        return text + TYPES_INI

    def write(self, name: str, text: str) -> str:
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def start_daemon(self, name: str, ports: List[int]) -> Daemon:
        """A shardqd on this cluster whose shards are reached at ports (a
        proxy's port in place of a shard's)."""
        lines = []
        for scope, tok in TOKENS.items():
            h = subprocess.run([need_env("SHARDQ_DAEMON"), "--hash-token"], input=tok,
                               capture_output=True, text=True, check=True).stdout.strip()
            lines.append(f"[token {scope}]\n{h}\nscopes = {scope}\n")
        text = (self._cluster_ini(ports) + "\n[daemon]\nlisten = 127.0.0.1:0\nthreads = 4\n"
                "claim_poll = 100ms\n\n" + "\n".join(lines))
        return Daemon(self.write(f"{name}.ini", text), os.path.join(self.dir, f"{name}.log"))

    def scalar(self, sql: str) -> int:
        """The sum over the shards of sql's single number."""
        return sum(int(psql(p, self.db, sql) or 0) for p in self.ports)

    def live(self, type_: str, status: Optional[str] = None) -> int:
        cond = f" AND status = '{status}'" if status else ""
        return self.scalar(f"SELECT count(*) FROM shardq.jobs WHERE task = '{type_}'{cond}")

    def completed(self, type_: str) -> int:
        return self.scalar(f"SELECT count(*) FROM shardq.jobs_history WHERE task = '{type_}'")

    def close(self) -> None:
        self.daemon.stop()
        for p in self.ports:
            try:
                psql(p, "postgres", f'DROP DATABASE IF EXISTS "{self.db}" WITH (FORCE)')
            except RuntimeError as e:
                print(f"cleanup: {e}", file=sys.stderr)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def cluster():
    c = Cluster()
    try:
        yield c
    finally:
        c.close()


def worker_proc(cluster: Cluster, type_: str, limit: int, record: str, *, sleep_ms: int = 0,
                prefetch: int = 0, url: Optional[str] = None, wait_ms: int = 2000) -> subprocess.Popen:
    """A worker process (tests/worker_proc.py) that appends "ID ATTEMPT" to
    record at the start of each run."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.Popen([sys.executable, os.path.join(HERE, "worker_proc.py"),
                             "--url", url or cluster.url, "--token", TOKENS["worker"],
                             "--type", type_, "--limit", str(limit), "--record", record,
                             "--sleep-ms", str(sleep_ms), "--prefetch", str(prefetch),
                             "--wait-ms", str(wait_ms)],
                            env=env, stderr=open(record + ".log", "w"))


def records(path: str) -> List[tuple]:
    """The (id, attempt) runs a worker_proc recorded."""
    try:
        with open(path) as f:
            return [tuple(int(x) for x in line.split()) for line in f if line.endswith("\n")]
    except FileNotFoundError:
        return []
