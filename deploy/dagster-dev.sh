#!/usr/bin/env bash
# The Dagster UI of a data directory (`make dagster`): refreshes the instance config from the
# repo, then runs `dagster dev` in its own process group and, on Ctrl-C or SIGTERM, stops
# everything it started (SIGINT to the group: dagster dev shuts its webserver, daemon and code
# servers down; whatever is left after STOP_SECONDS is killed).
#
# Usage: deploy/dagster-dev.sh BIN DATA   (DAGSTER_HOME from the environment; run from the repo)
set -euo pipefail
bin=$1
data=$2
stop_seconds=${STOP_SECONDS:-20}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
: "${DAGSTER_HOME:?DAGSTER_HOME must be set}"
mkdir -p "$DAGSTER_HOME"
install -m 0644 "$here/dagster.yaml" "$DAGSTER_HOME/dagster.yaml"
export EARTHMEM_DATA=$data
export EARTHMEM_CATALOG=$data/sample/catalog.json
export EARTHMEM_AREA=$data/sample/manifest.json
# `dagster dev` warns on every start that `dg dev` supersedes it; dg needs a dg project
# layout this repo does not use, so that one warning (and only it) is silenced.
export PYTHONWARNINGS="ignore:Function \`dev_command\` is superseded"

pid=""
stop() {
    trap - INT TERM
    [ -n "$pid" ] || exit 0 # a signal before dagster dev started: nothing to stop
    kill -INT -- "-$pid" 2>/dev/null || true
    for _ in $(seq 1 $((stop_seconds * 4))); do
        kill -0 -- "-$pid" 2>/dev/null || exit 0
        sleep 0.25
    done
    echo "dagster dev did not stop within ${stop_seconds}s: killing its processes" >&2
    kill -KILL -- "-$pid" 2>/dev/null || true
    for _ in $(seq 1 20); do # SIGKILL is delivered asynchronously: wait (up to 5 s) until gone
        pgrep -g "$pid" >/dev/null 2>&1 || break
        sleep 0.25
    done
    exit 0
}
# The trap is set before dagster dev starts, so a signal that arrives while it starts is not
# lost (bash would otherwise keep waiting on a dagster dev nobody stops).
trap stop INT TERM
set -m # job control: the background job below gets a process group of its own
"$bin/dagster" dev -w workspace.yaml -h 127.0.0.1 -p 3000 &
pid=$!
set +e
wait "$pid"
status=$?
# dagster dev ended by itself: take down anything it left in its group
kill -KILL -- "-$pid" 2>/dev/null || true
exit "$status"
