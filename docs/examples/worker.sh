#!/usr/bin/env bash
# A shardq worker over HTTP (shardqd) in bash with curl; python3 parses the
# JSON (no jq needed). It runs one job at a time:
#
#   claim with "start":false   the jobs come back `starting`, under the type's
#                              starting lease
#   POST /v1/jobs/start        when the job's turn comes (its lease becomes the
#                              type's execution_timeout); `lost` means its
#                              starting lease ran out while it waited: skip it
#   heartbeat                  every third of --lease while the command runs
#   complete, or fail          with the last line the command printed
#   release                    on shutdown, the claimed jobs never started
#
# Usage:
#   export SHARDQ_TOKEN=...                    # a token with the worker scope
#   docs/examples/worker.sh email sync:2       # TYPE[:N]: claim up to N at once (1)
#   docs/examples/worker.sh --exec ./handle-job.sh email
#
# Options: --url URL (http://127.0.0.1:8080), --token TOKEN ($SHARDQ_TOKEN),
# --wait-ms MS (5000), --lease SECONDS (30), --exec CMD, --name NAME.
#
# --lease: the types' execution_timeout, or less. A job is heartbeaten every
# third of it. (The script keeps this fixed rhythm: it does not read the
# lease_until_ms that start and heartbeat answer; worker.py does.) The jobs
# of one claim wait their turn under the starting lease (starting_timeout):
# claim no more at once (N) than run within it.
#
# A start, heartbeat, complete, fail or release answered 503 (a shard could
# not be reached, a partition is moving) is sent again after Retry-After, up
# to 5 times; `lost` or `not_found` means the job is no longer this run's:
# its result is dropped.
#
# CMD runs with `sh -c`, the job's params (JSON) on stdin and SHARDQ_JOB_ID,
# SHARDQ_JOB_TYPE, SHARDQ_JOB_ATTEMPT in its environment. Exit 0 completes
# the job; exit 100 fails it for good; any other exit fails it under the
# type's retry policy, with the last line of its output as the error. Without
# --exec, a job sleeps params.ms milliseconds if it has them, else its params
# are printed.
#
# SIGTERM: the job in hand finishes, the claimed jobs not started are
# released, and the script exits 0. (^C in a terminal also reaches the
# running command and curl, which then stop at once; a job cut short comes
# back to a worker after its lease.)
set -u

URL=http://127.0.0.1:8080
TOKEN=${SHARDQ_TOKEN:-}
WAIT_MS=5000
LEASE=30
EXEC=
NAME="sh-$(hostname)-$$"
TYPES=()

die() { echo "worker.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
	case $1 in
	--url) URL=${2:?--url needs a value}; shift 2 ;;
	--token) TOKEN=${2:?--token needs a value}; shift 2 ;;
	--wait-ms) WAIT_MS=${2:?}; shift 2 ;;
	--lease) LEASE=${2:?}; shift 2 ;;
	--exec) EXEC=${2:?}; shift 2 ;;
	--name) NAME=${2:?}; shift 2 ;;
	-h | --help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	-*) die "unknown option $1 (see --help)" ;;
	*) TYPES+=("$1"); shift ;;
	esac
done
[ -n "$TOKEN" ] || die "no token: give --token or set SHARDQ_TOKEN"
[ ${#TYPES[@]} -gt 0 ] || die "name at least one TYPE[:N] (see --help)"
[[ $WAIT_MS =~ ^[0-9]+$ ]] || die "--wait-ms: $WAIT_MS is not a number of milliseconds"
[[ $LEASE =~ ^[0-9]+$ && $LEASE -ge 1 ]] || die "--lease: a whole number of seconds, at least 1"
command -v python3 >/dev/null || die "python3 is needed to read JSON"
BEAT=$(python3 -c "print(round($LEASE / 3, 3))")   # seconds between heartbeats

tmp=$(mktemp -d) || exit 1
hb_pid=
trap 'rm -rf "$tmp"; [ -n "$hb_pid" ] && kill "$hb_pid" 2>/dev/null' EXIT
stop=0
trap 'stop=1; echo "worker.sh: stopping after the job in hand" >&2' TERM INT

# api METHOD PATH [BODY]: sets $status and $body (the reply).
api() {
	local data=()
	[ $# -ge 3 ] && data=(-H 'Content-Type: application/json' --data-binary "$3")
	status=$(curl -sS -o "$tmp/reply" -w '%{http_code}' --max-time $((WAIT_MS / 1000 + 60)) \
		-X "$1" -H "Authorization: Bearer $TOKEN" "${data[@]}" "$URL$2" 2>"$tmp/curl.err")
	if [ $? -ne 0 ]; then
		status=000
		body=$(cat "$tmp/curl.err")
	else
		body=$(cat "$tmp/reply")
	fi
}

# The daemon's error, as "STATUS CODE: message".
api_error() {
	if [ "$status" = 000 ]; then
		echo "no answer from $URL: $body"
		return
	fi
	printf '%s' "$body" | python3 -c '
import json, sys
try:
    e = json.load(sys.stdin)["error"]
    print(sys.argv[1], e["code"] + ":", e["message"])
except Exception:  # libevent answers a few errors itself, in HTML (413, 400, 501)
    print(sys.argv[1], "(not a JSON error body)")' "$status"
}

# Each result of a fenced call, one a line: "ID RESULT".
results() {
	printf '%s' "$body" | python3 -c '
import json, sys
for r in json.load(sys.stdin).get("results", []):
    print(r["id"], r["result"])' 2>/dev/null
}

jstr() { python3 -c 'import json, sys; print(json.dumps(sys.argv[1]))' "$1"; }

# fenced CALL REFS_JSON: sends a fenced call (again after a 503 or no answer,
# up to 5 times); prints problems; returns 0 when every job's result is ok.
fenced() {
	local try
	for try in 1 2 3 4 5 6; do
		api POST "/v1/jobs/$1" "{\"jobs\":[$2]}"
		case $status in
		200) return 0 ;;
		409) results | while read -r id res; do
				[ "$res" = ok ] || echo "worker.sh: $1 of job $id: $res (no longer this run's)" >&2
			done
			return 1 ;;
		503 | 000) echo "worker.sh: $1: $(api_error)" >&2
			[ $try -lt 6 ] && sleep 1 ;;   # Retry-After is 1
		*) echo "worker.sh: $1: $(api_error)" >&2
			return 1 ;;
		esac
	done
	echo "worker.sh: $1: given up; the lease brings the job back" >&2
	return 1
}

default_handler() {
	local ms
	ms=$(python3 -c '
import json, sys
ms = json.load(sys.stdin).get("ms")
print(ms if isinstance(ms, int) and ms > 0 else "")')
	if [ -n "$ms" ]; then
		sleep "$(python3 -c "print($ms / 1000)")"
	else
		echo "job $SHARDQ_JOB_ID ($SHARDQ_JOB_TYPE, attempt $SHARDQ_JOB_ATTEMPT): params $1"
	fi
}

# run_job ID ATTEMPT WORKER TYPE PARAMS: start, run with heartbeats, report.
run_job() {
	local id=$1 attempt=$2 type=$4 params=$5 ref rc err
	ref="{\"id\":$id,\"attempt\":$attempt,\"worker\":$(jstr "$3")}"
	if ! fenced start "$ref"; then
		echo "worker.sh: job $id not started; skipped" >&2
		return
	fi
	(
		while sleep "$BEAT"; do
			hb=$(curl -sS -o /dev/null -w '%{http_code}' --max-time 60 \
				-H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
				--data-binary "{\"jobs\":[$ref]}" "$URL/v1/jobs/heartbeat")
			case $hb in
			200) ;;
			409) echo "worker.sh: heartbeat of job $id: lost; its result will not count" >&2
				break ;;
			*) echo "worker.sh: heartbeat of job $id: status $hb; trying again" >&2 ;;
			esac
		done
	) &
	hb_pid=$!
	export SHARDQ_JOB_ID=$id SHARDQ_JOB_TYPE=$type SHARDQ_JOB_ATTEMPT=$attempt
	if [ -n "$EXEC" ]; then
		printf '%s' "$params" | sh -c "$EXEC" >"$tmp/out" 2>&1
	else
		printf '%s' "$params" | default_handler "$params" >"$tmp/out" 2>&1
	fi
	rc=$?
	kill "$hb_pid" 2>/dev/null
	wait "$hb_pid" 2>/dev/null
	hb_pid=
	sed "s/^/[job $id] /" "$tmp/out"
	if [ $rc -eq 0 ]; then
		fenced complete "$ref" && echo "worker.sh: job $id completed" >&2
	else
		err=$(grep -v '^[[:space:]]*$' "$tmp/out" | tail -n 1)
		[ -n "$err" ] || err="exit $rc"
		local permanent=false
		[ $rc -eq 100 ] && permanent=true
		fenced fail "${ref%\}},\"error\":$(jstr "$err"),\"permanent\":$permanent}" &&
			echo "worker.sh: job $id failed: $err" >&2
	fi
}

claim_types=
for t in "${TYPES[@]}"; do
	name=${t%%:*} limit=1
	[ "$name" != "$t" ] && limit=${t#*:}
	[[ $limit =~ ^[0-9]+$ ]] || die "$t: N must be a number"
	claim_types+="${claim_types:+,}{\"type\":$(jstr "$name"),\"limit\":$limit}"
done

echo "worker.sh: claiming ${TYPES[*]} from $URL as $NAME" >&2
while [ $stop = 0 ]; do
	api POST /v1/claim "{\"worker\":$(jstr "$NAME"),\"types\":[$claim_types],\"wait_ms\":$WAIT_MS,\"start\":false}"
	case $status in
	200) ;;
	503 | 000) echo "worker.sh: claim: $(api_error); trying again in 1s" >&2; sleep 1; continue ;;
	*) echo "worker.sh: claim: $(api_error)" >&2; exit 3 ;;
	esac
	printf '%s' "$body" | python3 -c '
import json, sys
for j in json.load(sys.stdin)["jobs"]:
    print(j["id"], j["attempt"], j["worker"], j["type"],
          json.dumps(j["params"], separators=(",", ":")), sep="\t")' >"$tmp/jobs"
	unstarted=()
	while IFS=$'\t' read -r -u 3 id attempt wid type params; do
		if [ $stop = 1 ]; then
			unstarted+=("{\"id\":$id,\"attempt\":$attempt,\"worker\":$(jstr "$wid")}")
			continue
		fi
		run_job "$id" "$attempt" "$wid" "$type" "$params"
	done 3<"$tmp/jobs"
	if [ ${#unstarted[@]} -gt 0 ]; then
		refs=$(IFS=,; echo "${unstarted[*]}")
		fenced release "$refs" && echo "worker.sh: released ${#unstarted[@]} jobs not started" >&2
	fi
done
echo "worker.sh: stopped" >&2
exit 0
