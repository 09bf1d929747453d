#!/usr/bin/env bash
# check_exports.sh LIB HEADER - the shared library exports exactly the
# functions that the public header declares: nothing internal leaks (hidden
# visibility), and nothing declared is missing from the library.
set -euo pipefail
lib=$1 header=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The header's function declarations: comments stripped by the preprocessor,
# statements split at ';', typedefs and inline definitions left out.
cc -fpreprocessed -dD -E -P "$header" |
	grep -v '^#' | tr '\n' ' ' | tr ';' '\n' |
	grep -v -E '^[[:space:]]*typedef|\{' |
	grep -o -E '\bsq_[A-Za-z0-9_]+[[:space:]]*\(' | tr -d '( ' | sort -u >"$tmp/declared"

nm -D --defined-only "$lib" | awk '$2 ~ /^[TtWwDdBbRr]$/ { print $3 }' |
	sed 's/@.*//' | grep -v -E '^_+(asan|ubsan|sanitizer|odr_asan)' | sort -u >"$tmp/exported"

n=$(wc -l <"$tmp/declared")
if [ "$n" -lt 20 ]; then
	echo "check_exports: found only $n declarations in $header; the parse is broken" >&2
	exit 1
fi
if ! diff -u "$tmp/declared" "$tmp/exported" >"$tmp/diff"; then
	echo "check_exports: $lib does not export exactly what $header declares" >&2
	echo "(- declared but not exported, + exported but not declared; mark" >&2
	echo " internals static or keep them out of the header's visibility pragma)" >&2
	sed -n '3,$p' "$tmp/diff" | grep '^[-+]' >&2
	exit 1
fi
echo "check_exports: $n functions declared, the same $n exported"
