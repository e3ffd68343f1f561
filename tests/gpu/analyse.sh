#!/usr/bin/env bash
# The GPU campaign's analysis (docs/real-gpu.md); runs anywhere loadgen is installed, not only by the GPU.
#
#   tests/gpu/analyse.sh OUT [RUN]
#
# OUT is what `tests/gpu/campaign.sh measure OUT` wrote (results/ or results.tar.gz, and the two servers' logs,
# OUT/run/NAME.log or OUT/NAME.log); RUN the sweep's run id (default: the newest gpu-sweep run). Prints the truth
# tables (tests/gpu/gpu_truth.py tables), loadgen's answer (compare_algorithms, repeats, energy, gpu_by_step),
# the twins fitted from C = 1, 4, 16 and their error on the other levels, and the capacity at an SLO measured and
# predicted. The twins' predictions go to a copy of the results, never into OUT.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
OUT="$(realpath "${1:?usage: tests/gpu/analyse.sh OUT [RUN]}")"
LOADGEN="${LOADGEN:-python3 -m loadgen.cli}"
SLO_TPOT_MS="${SLO_TPOT_MS:-25}"      # 40 tok/s a user; binds between C = 2 and 8 on the H100 campaign
SLO_TTFT_MS="${SLO_TTFT_MS:-1000}"
cd "$REPO"
[[ -d "$OUT/results/runs" ]] || tar xzf "$OUT/results.tar.gz" -C "$OUT"
RUN="${2:-$(ls "$OUT/results/runs" | sed -n 's/^run_id=\(gpu-sweep-.*\)/\1/p' | sort | tail -n 1)}"
WORK="$(mktemp -d)"; trap 'rm -rf "$WORK"' EXIT
cp -rL "$OUT/results" "$WORK/results"   # -L: OUT/results may be a link; predictions stay out of it
q() { echo; echo "### loadgen query $*"; echo; $LOADGEN query "$@" --results "$OUT/results" --run "$RUN"; }

python3 tests/gpu/gpu_truth.py tables "$OUT"
q compare_algorithms; q repeats; q energy; q gpu_by_step
q capacity --set slo_tpot_ms="$SLO_TPOT_MS" --set slo_ttft_ms="$SLO_TTFT_MS"
for target in plain drafted; do
  draft=(); [[ $target == drafted ]] && draft=(--draft-tokens "$((${DRAFT_MAX:-4} + 1))")
  echo; echo "### the twin of $target, fitted from C = 1, 4, 16"; echo
  $LOADGEN twin fit --results "$OUT/results" --run "$RUN" --target "$target" --levels 1 4 16 \
    --hardware tests/gpu/h100.toml --model-profile tests/gpu/smollm2-135m-x4.toml "${draft[@]}" -o "$WORK/$target.toml"
  $LOADGEN twin predict --twin "$WORK/$target.toml" --concurrency 1 2 4 8 16 32 --results "$WORK/results" | tail -n 8
  $LOADGEN twin predict --twin "$WORK/$target.toml" --slo "ttft_ms=$SLO_TTFT_MS,tpot_ms=$SLO_TPOT_MS" \
    --search-max 64 --results "$WORK/slo-$target" | grep -E "^    $target: at" || true
done
echo; echo "### twin_error (in_fit false: the levels the twins did not see)"; echo
$LOADGEN query twin_error --results "$WORK/results"
