#!/usr/bin/env bash
# clients/python/run_tests.sh -- installs the Python client into a fresh venv
# the way a fleet machine would (Debian's python3-venv and python3-setuptools,
# --no-index: nothing from the network), then runs its pytest suite from that
# venv against a real shardqd on the test shards.
#
# Usage: run_tests.sh SHARDQD SHARDQ_CLI [pytest args...]
# Env:   SHARDQ_TEST_PORTS (the test shards, at least 2), SHARDQ_TEST_STALL,
#        PYTHON (default /usr/bin/python3, Debian's: its python3-pytest and
#        python3-setuptools are what the venv sees).
set -euo pipefail
HERE=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
[[ $# -ge 2 ]] || { echo "usage: $0 SHARDQD SHARDQ_CLI [pytest args...]" >&2; exit 2; }
export SHARDQ_DAEMON=$1 SHARDQ_CLI=$2
shift 2
PYTHON=${PYTHON:-/usr/bin/python3}
[[ -x $PYTHON ]] || PYTHON=$(command -v python3)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/shardq-pyclient-venv.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

"$PYTHON" -m venv --system-site-packages "$WORK/venv" || {
    echo "$0: '$PYTHON -m venv' failed: install python3-venv (scripts/deps)" >&2; exit 1; }
# A copy of the sources, so that the build leaves nothing in the tree.
cp -r "$HERE/pyproject.toml" "$HERE/README.md" "$HERE/src" "$WORK/"
"$WORK/venv/bin/python" -m pip install --quiet --no-build-isolation --no-index \
    --disable-pip-version-check "$WORK" || {
    echo "$0: pip install --no-index failed: install python3-pip and python3-setuptools (scripts/deps)" >&2
    exit 1; }
"$WORK/venv/bin/python" -c 'import pytest' 2>/dev/null || {
    echo "$0: pytest is missing: install python3-pytest (scripts/deps)" >&2; exit 1; }
# Import the installed package, never the source tree.
cd "$WORK"
export PYTHONDONTWRITEBYTECODE=1 # nothing written into the tree
exec "$WORK/venv/bin/python" -m pytest -p no:cacheprovider -q "$HERE/tests" "$@"
