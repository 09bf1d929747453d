#!/usr/bin/env bash
# check_function_length.sh SRC_DIR [MAX] - no function of src/ is longer than
# MAX lines (100): a longer one hides its steps. A function's body is what
# lies between a '{' and a '}' alone at the start of a line (the house
# style, .clang-format); the line before the '{' names it.
set -euo pipefail
src=$1 max=${2:-100}
out=$(find "$src" -name '*.c' | sort | while read -r f; do
	awk -v F="$f" -v MAX="$max" '
		/^\{$/ { start = NR; name = prev }
		{ prev = $0 }
		/^\}/ && start { n = NR - start + 1; if (n > MAX) printf "%s:%d: %d lines: %s\n", F, start, n, name; start = 0 }
	' "$f"
done)
count=$(find "$src" -name '*.c' -exec grep -c '^{$' {} + | awk -F: '{ s += $NF } END { print s }')
if [ "$count" -lt 100 ]; then
	echo "check_function_length: found only $count functions under $src; the scan is broken" >&2
	exit 1
fi
if [ -n "$out" ]; then
	echo "check_function_length: functions over $max lines (split them into named steps):" >&2
	echo "$out" >&2
	exit 1
fi
echo "check_function_length: $count functions under $src, none over $max lines"
