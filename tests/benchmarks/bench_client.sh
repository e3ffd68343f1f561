#!/usr/bin/env bash
# loadgen's worker against the clientbench firehose (../shared/clientbench) at the issue's three points, each next
# to a baseline run in the same session: the harness's tuned aiohttp client (iter_any + orjson + uvloop).
# Server on CPU 0, the whole loadgen client (driver, Ray, worker, sink) on CPU 1.
#   bash tests/benchmarks/bench_client.sh        # prints the harness's table, then loadgen / baseline ratios,
#   and loadgen's own coalescing figure (client_health.read_together_pct) next to the harness's truth
# Needs the harness's venv-base with duckdb (its README: "loadgen itself").
# TELEMETRY=http://127.0.0.1:PORT/emulator/dcgm/metrics: loadgen runs with a GPU sampler reading that exporter
# (runs named lg-wN-gpu-*), to measure the sampler's cost on the client against runs without (docs/telemetry.md).
set -euo pipefail
export CLIENTBENCH_ROOT=${CLIENTBENCH_ROOT:-$HOME/.cache/clientbench}
PY=$CLIENTBENCH_ROOT/venv-base/bin/python
HERE=$(cd "$(dirname "$0")" && pwd)
CB=$(cd "$HERE/../../../shared/clientbench" && pwd)
LG=${LOADGEN:-$(command -v loadgen)}
WORKERS=${WORKERS:-1}
LGN=lg-w$WORKERS${TELEMETRY:+-gpu}
TEL=${TELEMETRY:+--telemetry $TELEMETRY}
cd "$CB"
run() {  # conc gap
  local name="$LGN-$1x$2"
  rm -rf "$CLIENTBENCH_ROOT/runs/$name/results"  # loadgen appends runs to a results folder; measure this one only
  $PY bench.py run --client cmd --label "loadgen-w$WORKERS" --adapter loadgen --route generate -c "$1" --gap-ms "$2" \
    --name "$name" --retries 2 --wait-quiet 10 \
    --cmd "$LG run --url {url} --flavor sglang --concurrency {conc} --requests {requests} --max-tokens {max_tokens} --workers $WORKERS $TEL --results {out}/results" >/dev/null
  $PY bench.py run --client ref-tuned --route generate -c "$1" --gap-ms "$2" --name "base-$1x$2" --retries 2 \
    --wait-quiet 10 >/dev/null
}
run 256 5
run 64 20
run 256 20
R=$CLIENTBENCH_ROOT/runs
echo "this machine's CPU, on the client's core (the floor under the p99 gap error):"
taskset -c 1 python3 "$HERE/bench_cpu_jitter.py" 5
$PY bench.py table "$R"/"$LGN"-{256x5,64x20,256x20} "$R"/base-{256x5,64x20,256x20}
$PY - "$R" "$LGN" <<'PY'
import json, sys
root, lgn = sys.argv[1], sys.argv[2]
print("\nloadgen / tuned aiohttp, same session:  cpu per frame   p99 gap error   coalesced")
for point in ("256x5", "64x20", "256x20"):
    lg, base = (json.load(open(f"{root}/{n}-{point}/result.json"))["row"] for n in (lgn, "base"))
    ratio = lambda k: f"{lg[k] / base[k]:.3f}" if base[k] else "-"
    print(f"  {point:8s} {ratio('us_per_frame'):>30s} {ratio('gap_err_p99'):>15s} {ratio('coalesced'):>11s}")
PY
echo
echo "coalesced frames, loadgen's own figure (client_health.read_together_pct) vs the harness's truth:"
for point in 256x5 64x20 256x20; do
  run="$R/$LGN-$point"
  "$LG" query client_health --results "$run/results" --format json | $PY -c '
import json, sys
own = json.load(sys.stdin)[0]["read_together_pct"]
truth = 100 * json.load(open(sys.argv[1]))["row"]["coalesced"]
print(f"  {sys.argv[2]:8s} loadgen {own} %   harness {truth:.2f} %")' "$run/result.json" "$point"
done
