#!/usr/bin/env bash
# The shipped Prometheus files (dist/prometheus): the rules and the config
# check, the rules' unit tests pass, and every alert of the rules is
# expected to fire by at least one of those tests.
set -euo pipefail
dir=${1:?usage: prometheus_rules.sh DIST_PROMETHEUS_DIR}
command -v promtool >/dev/null || { echo "promtool is missing: scripts/deps installs Debian's prometheus" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
promtool check rules "$dir/shardq-alerts.yml"
# the config names a token file: one of its own here
echo token >"$tmp/token"
sed "s|credentials_file: .*|credentials_file: $tmp/token|" "$dir/prometheus.yml" >"$tmp/prometheus.yml"
cp "$dir/shardq-alerts.yml" "$tmp/"
promtool check config "$tmp/prometheus.yml"
(cd "$dir" && promtool test rules shardq-alerts.test.yml)
untested=()
for a in $(sed -n 's/^ *- alert: *\([A-Za-z0-9_]*\).*/\1/p' "$dir/shardq-alerts.yml"); do
    # an alert_rule_test of this alert whose exp_alerts is not empty
    if ! awk -v a="$a" '
        /alertname:/ { cur = $2 }
        /exp_alerts:/ { if (cur == a && $0 !~ /\[\]/) found = 1 }
        END { exit !found }' "$dir/shardq-alerts.test.yml"; then
        untested+=("$a")
    fi
done
if ((${#untested[@]})); then
    echo "alerts no test expects to fire: ${untested[*]} (add a case to shardq-alerts.test.yml)" >&2
    exit 1
fi
# and a runbook in docs/operations.md ("Runbooks: one per alert")
ops="$dir/../../docs/operations.md"
for a in $(sed -n 's/^ *- alert: *\([A-Za-z0-9_]*\).*/\1/p' "$dir/shardq-alerts.yml"); do
    grep -q "\*\*$a\*\*" "$ops" || { echo "alert $a has no runbook in docs/operations.md" >&2; exit 1; }
done
echo "every alert of shardq-alerts.yml has a test that expects it, and a runbook"
