#!/usr/bin/env bash
# Enqueues shardq jobs through shardqd (POST /v1/jobs) with curl; python3
# reads the replies (no jq needed).
#
# Usage:
#   export SHARDQ_TOKEN=...                       # a token with the producer scope
#   docs/examples/producer.sh --type email --count 1000 --params '{"ms":20}'
#   docs/examples/producer.sh --file jobs.jsonl  # one job object per line
#
# Options: --url URL (http://127.0.0.1:8080), --token TOKEN ($SHARDQ_TOKEN),
# --batch N (jobs per request, 1..10000; 500), --type T, --count N (1),
# --params JSON (an object, the same for every job), --key-prefix P (job i
# gets the key Pi; default: no key), --file F (JSONL; `-`: stdin).
#
# Prints the outcomes (inserted, duplicate, ...) at the end. On an error it
# prints the daemon's code and message and stops: the batches before were
# written; for a 503 the reply says which jobs of the batch were (they are
# counted; not_written ones are to be sent again; see docs/http.md). A job
# the daemon refuses (400 bad_job) is named by its index in the batch,
# counted from 0; nothing of that batch is written.
set -u

URL=http://127.0.0.1:8080
TOKEN=${SHARDQ_TOKEN:-}
BATCH=500
TYPE= COUNT=1 PARAMS= KEY_PREFIX= FILE=

die() { echo "producer.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
	case $1 in
	--url) URL=${2:?--url needs a value}; shift 2 ;;
	--token) TOKEN=${2:?--token needs a value}; shift 2 ;;
	--batch) BATCH=${2:?}; shift 2 ;;
	--type) TYPE=${2:?}; shift 2 ;;
	--count) COUNT=${2:?}; shift 2 ;;
	--params) PARAMS=${2:?}; shift 2 ;;
	--key-prefix) KEY_PREFIX=${2:?}; shift 2 ;;
	--file) FILE=${2:?}; shift 2 ;;
	-h | --help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) die "unknown argument $1 (see --help)" ;;
	esac
done
[ -n "$TOKEN" ] || die "no token: give --token or set SHARDQ_TOKEN"
[ -n "$TYPE" ] || [ -n "$FILE" ] || die "give --type T or --file F (see --help)"
[ -n "$TYPE" ] && [ -n "$FILE" ] && die "--type and --file do not go together"
[[ $BATCH =~ ^[0-9]+$ && $BATCH -ge 1 && $BATCH -le 10000 ]] || die "--batch: 1..10000"
[[ $COUNT =~ ^[0-9]+$ ]] || die "--count: $COUNT is not a number"
command -v python3 >/dev/null || die "python3 is needed to read JSON"

jstr() { python3 -c 'import json, sys; print(json.dumps(sys.argv[1]))' "$1"; }

tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
: >"$tmp/results"

# send BODY_FILE: POST /v1/jobs; appends the results to $tmp/results; exits
# on an error.
send() {
	local status
	status=$(curl -sS -o "$tmp/reply" -w '%{http_code}' --max-time 120 \
		-H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
		--data-binary @"$1" "$URL/v1/jobs") || {
		echo "producer.sh: no answer from $URL; whether the last batch was written is not known" >&2
		summary
		exit 1
	}
	python3 - "$status" "$tmp/reply" "$tmp/results" <<'EOF' || { summary; exit 1; }
import json, sys
status, reply, results = sys.argv[1], sys.argv[2], sys.argv[3]
try:
    body = json.load(open(reply))
except ValueError:
    body = {}
with open(results, "a") as out:
    for r in body.get("results", []):
        out.write(r["outcome"] + "\n")
if status != "200":
    e = body.get("error")
    if isinstance(e, dict):
        print(f"producer.sh: shardqd answered {status} {e.get('code', '?')}: {e.get('message', '')}",
              file=sys.stderr)
    elif status == "413":  # libevent's own reply, in HTML
        print("producer.sh: shardqd answered 413: the batch is larger than its max_body; "
              "use a smaller --batch (or smaller params)", file=sys.stderr)
    else:
        print(f"producer.sh: shardqd answered {status} (not a JSON error body)", file=sys.stderr)
    sys.exit(1)
EOF
}

summary() {
	sort "$tmp/results" | uniq -c | awk '
		{ n += $1; s = s (s ? ", " : "") $2 " " $1 }
		END { printf "%d results: %s\n", n, (s ? s : "none") }'
}

if [ -n "$TYPE" ]; then
	jtype=$(jstr "$TYPE")
	params=${PARAMS:-'{}'}
	i=0
	while [ $i -lt "$COUNT" ]; do
		{
			printf '{"jobs":['
			n=0
			while [ $n -lt "$BATCH" ] && [ $i -lt "$COUNT" ]; do
				[ $n -gt 0 ] && printf ','
				key=
				[ -n "$KEY_PREFIX" ] && key=",\"key\":$(jstr "$KEY_PREFIX$i")"
				printf '{"type":%s%s,"params":%s}' "$jtype" "$key" "$params"
				n=$((n + 1)) i=$((i + 1))
			done
			printf ']}'
		} >"$tmp/body"
		send "$tmp/body"
	done
else
	[ "$FILE" = - ] && FILE=/dev/stdin
	[ -r "$FILE" ] || die "--file $FILE: cannot read it"
	n=0
	flush() {
		[ $n -gt 0 ] || return 0
		printf ']}' >>"$tmp/body"
		send "$tmp/body"
		n=0
	}
	while IFS= read -r line || [ -n "$line" ]; do
		[[ $line =~ ^[[:space:]]*$ ]] && continue
		if [ $n -eq 0 ]; then printf '{"jobs":[' >"$tmp/body"; else printf ',' >>"$tmp/body"; fi
		printf '%s' "$line" >>"$tmp/body"
		n=$((n + 1))
		[ $n -ge "$BATCH" ] && flush
	done <"$FILE"
	flush
fi
summary
