#!/usr/bin/env bash
# tests/install_test.sh - `cmake --install` into a staging prefix, then
# docs/example_worker.c built out of tree twice (with pkg-config alone, and
# with find_package(shardq)), and both run against the test shards: every
# job they are given is completed.
#
# usage: install_test.sh BUILD_DIR SOURCE_DIR [CFLAGS]
#   CFLAGS: what a program linking this build's library needs (the
#   sanitizers of a sanitized build). Shards: $SHARDQ_TEST_PORTS (the first
#   two). A wait fails after $SHARDQ_TEST_STALL seconds (90) without progress.
set -euo pipefail
B=$1 S=$2 CF=${3:-}
STALL=${SHARDQ_TEST_STALL:-90}
T=$(mktemp -d "${TMPDIR:-/tmp}/shardq-install.XXXXXX")
STAGE=$T/stage
DB=shardq_install_test
PIDS=()
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    rm -rf "$T"
}
trap cleanup EXIT
fail() { printf 'install_test: FAIL: %s\n' "$*" >&2; exit 1; }
say() { printf 'install_test: %s\n' "$*"; }

IFS=, read -r -a PORTS <<< "${SHARDQ_TEST_PORTS:?SHARDQ_TEST_PORTS is not set (run through ctest)}"
[[ ${#PORTS[@]} -ge 2 ]] || fail "need two shards in SHARDQ_TEST_PORTS"

# 1. what is installed
cmake --install "$B" --prefix "$STAGE" > "$T/install.log" || fail "cmake --install: $(cat "$T/install.log")"
LIBDIR=$(dirname "$(find "$STAGE" -name 'libshardq.so' | head -1)")
for f in bin/shardq bin/shardqd bin/shardq-exec include/shardq.h \
    share/man/man1/shardq.1 share/man/man8/shardqd.8 \
    share/doc/shardq/examples/shardq.ini share/doc/shardq/examples/example_worker.c \
    lib/systemd/system/shardqd.service lib/systemd/system/shardq-worker@.service; do
    [[ -e $STAGE/$f ]] || fail "not installed: $f"
done
[[ -n $LIBDIR && -e $LIBDIR/pkgconfig/shardq.pc && -e $LIBDIR/cmake/shardq/shardqConfig.cmake ]] ||
    fail "no library, shardq.pc or shardqConfig.cmake under $STAGE"
SONAME=$(readelf -d "$LIBDIR/libshardq.so" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[[ $SONAME == libshardq.so.* && -e $LIBDIR/$SONAME ]] || fail "libshardq.so has no SONAME, or no file of it ($SONAME)"
if readelf -d "$LIBDIR/libshardq.so" | grep -Eq 'NEEDED.*(jansson|inih)'; then
    fail "libshardq links a library it does not use: $(readelf -d "$LIBDIR/libshardq.so" | grep NEEDED)"
fi
"$STAGE/bin/shardq" --help > /dev/null || fail "the installed shardq does not run"
"$STAGE/bin/shardqd" --help > /dev/null || fail "the installed shardqd does not run"
say "installed: $SONAME, shardq.pc, shardqConfig.cmake, 3 programs, 2 man pages, 2 units"

# 2. the example, out of tree: pkg-config only, then find_package
export PKG_CONFIG_PATH=$LIBDIR/pkgconfig
# shellcheck disable=SC2046,SC2086
cc $CF -o "$T/worker-pc" "$S/docs/example_worker.c" $(pkg-config --cflags --libs shardq) \
    -Wl,-rpath,"$LIBDIR" 2> "$T/cc.log" || fail "cc with pkg-config: $(cat "$T/cc.log")"
mkdir -p "$T/cm"
cat > "$T/cm/CMakeLists.txt" <<EOF
cmake_minimum_required(VERSION 3.18)
project(example_worker C)
find_package(shardq 0.1 REQUIRED)
add_executable(worker-cmake $S/docs/example_worker.c)
target_link_libraries(worker-cmake PRIVATE shardq::shardq)
EOF
cmake -S "$T/cm" -B "$T/cm/build" -DCMAKE_PREFIX_PATH="$STAGE" -DCMAKE_C_FLAGS="$CF" \
    -DCMAKE_EXE_LINKER_FLAGS="$CF" > "$T/cm.log" 2>&1 || fail "find_package: $(cat "$T/cm.log")"
cmake --build "$T/cm/build" >> "$T/cm.log" 2>&1 || fail "build with find_package: $(cat "$T/cm.log")"
say "built docs/example_worker.c with pkg-config and with find_package(shardq)"

# 3. both run against the shards
psql_at() { PGOPTIONS="-c client_min_messages=warning" psql -X -q -h 127.0.0.1 -p "$1" -U postgres -d "$2" -At -c "$3"; }
for p in "${PORTS[0]}" "${PORTS[1]}"; do
    psql_at "$p" postgres "DROP DATABASE IF EXISTS $DB WITH (FORCE)" > /dev/null
    psql_at "$p" postgres "CREATE DATABASE $DB" > /dev/null
done
CONF=$T/shardq.ini
cat > "$CONF" <<EOF
[cluster]
partitions = 64
[shard s1]
dsn = host=127.0.0.1 port=${PORTS[0]} dbname=$DB user=postgres
[shard s2]
dsn = host=127.0.0.1 port=${PORTS[1]} dbname=$DB user=postgres
[type email]
[type resize]
EOF
"$STAGE/bin/shardq" -c "$CONF" init > /dev/null || fail "shardq init"
live() {
    local n=0 p c
    for p in "${PORTS[0]}" "${PORTS[1]}"; do
        c=$(psql_at "$p" "$DB" "SELECT count(*) FROM shardq.jobs WHERE status IN ('ready', 'starting', 'running')")
        n=$((n + c))
    done
    echo "$n"
}
for w in worker-pc cm/build/worker-cmake; do
    for i in $(seq 40); do printf '{"type":"email","params":{"to":"u%d@example.org"}}\n' "$i"; done > "$T/jobs.jsonl"
    printf '{"type":"resize"}\n{"type":"resize"}\n' >> "$T/jobs.jsonl"
    "$STAGE/bin/shardq" -c "$CONF" enqueue --file "$T/jobs.jsonl" > /dev/null || fail "enqueue"
    ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} "$T/$w" "$CONF" > "$T/$(basename "$w").log" 2>&1 &
    PIDS+=($!)
    pid=$!
    last=$(live) since=$SECONDS
    while [[ $last -gt 0 ]]; do
        sleep 0.2
        kill -0 "$pid" 2> /dev/null || fail "$w exited with $last jobs left: $(cat "$T/$(basename "$w").log")"
        n=$(live)
        if [[ $n -lt $last ]]; then last=$n since=$SECONDS; fi
        [[ $((SECONDS - since)) -le $STALL ]] ||
            fail "$w: $last jobs still live after ${STALL}s without progress; its output: $(cat "$T/$(basename "$w").log")"
    done
    kill -TERM "$pid"
    rc=0
    wait "$pid" || rc=$?
    [[ $rc -eq 0 ]] || fail "$w exited $rc on SIGTERM: $(cat "$T/$(basename "$w").log")"
    bad=0
    for p in "${PORTS[0]}" "${PORTS[1]}"; do
        c=$(psql_at "$p" "$DB" "SELECT count(*) FROM shardq.jobs WHERE status <> 'completed'")
        bad=$((bad + c))
    done
    [[ $bad -eq 0 ]] || fail "$w: $bad jobs not completed"
    say "$w completed its 42 jobs and stopped cleanly"
done
for p in "${PORTS[0]}" "${PORTS[1]}"; do
    psql_at "$p" postgres "DROP DATABASE IF EXISTS $DB WITH (FORCE)" > /dev/null
done
say "ok"
