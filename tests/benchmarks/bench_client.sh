#!/usr/bin/env bash
# loadgen's worker against the clientbench firehose (../shared/clientbench), at the issue's three points, plus a
# saturation point: server on CPU 0, the whole loadgen client (driver, Ray, worker, sink) on CPU 1.
#   bash tests/benchmarks/bench_client.sh            # then: $PY bench.py table $CLIENTBENCH_ROOT/runs/lg-*
# Needs the harness's venv-base with duckdb (its README: "loadgen itself").
set -euo pipefail
export CLIENTBENCH_ROOT=${CLIENTBENCH_ROOT:-$HOME/.cache/clientbench}
PY=$CLIENTBENCH_ROOT/venv-base/bin/python
CB=$(cd "$(dirname "$0")/../../../shared/clientbench" && pwd)
LG=${LOADGEN:-$(command -v loadgen)}
WORKERS=${WORKERS:-1}
cd "$CB"
run() {  # name conc gap
  rm -rf "$CLIENTBENCH_ROOT/runs/$1/results"  # loadgen appends runs to a results folder; measure this one only
  $PY bench.py run --client cmd --label "loadgen-w$WORKERS" --adapter loadgen --route generate -c "$2" --gap-ms "$3" \
    --name "$1" --retries 2 --wait-quiet 10 \
    --cmd "$LG run --url {url} --flavor sglang --concurrency {conc} --requests {requests} --max-tokens {max_tokens} --workers $WORKERS --results {out}/results"
}
run "lg-w$WORKERS-256x5" 256 5
run "lg-w$WORKERS-64x20" 64 20
run "lg-w$WORKERS-256x20" 256 20
$PY bench.py table "$CLIENTBENCH_ROOT"/runs/lg-w"$WORKERS"-*
