#!/usr/bin/env bash
# loadgen as a row of the client benchmark's fault matrix (shared/clientbench/README.md, "Fault injection";
# the peers' rows are in shared/clientbench/FAULTS.md, made with the same load and fault flags).
# Each case: bench.py runs the firehose with the fault flags and `loadgen run` against it, reads loadgen's
# Parquet through the harness's `loadgen` adapter, and measures what loadgen concluded against the server log.
# Usage: bash tests/benchmarks/run_fault_matrix.sh [fault ...]
#   (default: none close http stall malformed abort nodone abort0 nodone-full close0 close-rst hang)
# Env: CLIENTBENCH_ROOT (default ~/.cache/clientbench; needs venv-base with duckdb), CLIENTBENCH (harness
#      folder, default ../shared/clientbench from the repo), OUT_ROOT (default $CLIENTBENCH_ROOT/faults/runs),
#      LOADGEN (console script, default: `command -v loadgen` resolved to its real path), CONC (32), GAP (20),
#      MAX_TOKENS (100), REQUESTS (160), RATE (0.2), SEED (1), SKIP (1), STALL_MS (3000), HANG_S (40),
#      STALL_TIMEOUT (10: loadgen's per-request stall timeout, seconds)
set -euo pipefail
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
HARNESS="${CLIENTBENCH:-$REPO/../shared/clientbench}"
CLIENTBENCH_ROOT="${CLIENTBENCH_ROOT:-$HOME/.cache/clientbench}"; export CLIENTBENCH_ROOT
PY="$CLIENTBENCH_ROOT/venv-base/bin/python"
OUT_ROOT="${OUT_ROOT:-$CLIENTBENCH_ROOT/faults/runs}"
LOADGEN="${LOADGEN:-$(command -v loadgen)}"
if command -v pyenv >/dev/null && [[ "$LOADGEN" == */shims/* ]]; then LOADGEN="$(pyenv which loadgen)"; fi
CONC="${CONC:-32}"; GAP="${GAP:-20}"; MAX_TOKENS="${MAX_TOKENS:-100}"; REQUESTS="${REQUESTS:-160}"
RATE="${RATE:-0.2}"; SEED="${SEED:-1}"; SKIP="${SKIP:-1}"; STALL_MS="${STALL_MS:-3000}"; HANG_S="${HANG_S:-40}"
STALL_TIMEOUT="${STALL_TIMEOUT:-10}"
FAULTS=("$@")
[ ${#FAULTS[@]} -eq 0 ] && FAULTS=(none close http stall malformed abort nodone abort0 nodone-full close0 close-rst hang)
"$PY" -c "import duckdb" || { echo "venv-base needs duckdb: $PY -m pip install duckdb" >&2; exit 2; }

half=$((MAX_TOKENS / 2))
fault_flags() {   # the same cases and flags as the harness's run_faults.sh
  case "$1" in
    none)        echo "--fault-abort --fault-rate 0" ;;
    close)       echo "--fault-close-after $half" ;;
    close0)      echo "--fault-close-after 0" ;;
    close-rst)   echo "--fault-close-after $half --fault-close-mode rst" ;;
    http)        echo "--fault-http 503" ;;
    stall)       echo "--fault-stall-ms $STALL_MS" ;;
    malformed)   echo "--fault-malformed" ;;
    abort)       echo "--fault-abort" ;;
    abort0)      echo "--fault-abort --fault-frame 0" ;;
    nodone)      echo "--fault-no-done" ;;
    nodone-full) echo "--fault-no-done --fault-frame 1000000" ;;
    hang)        echo "--fault-stall-ms 600000" ;;
    *) echo "unknown fault $1" >&2; exit 2 ;;
  esac
}

dirs=()
for f in "${FAULTS[@]}"; do
  name="loadgen-$f"
  dirs+=("$OUT_ROOT/$name")
  rm -rf "${OUT_ROOT:?}/$name"
  timeout=300; [ "$f" = hang ] && timeout="$HANG_S"
  cmd="$LOADGEN run --url {url} --flavor sglang --concurrency {conc} --requests {requests} --max-tokens {max_tokens}"
  cmd+=" --stall-timeout $STALL_TIMEOUT --name fault-$f --results {out}/results"
  echo "== $name" >&2
  # shellcheck disable=SC2046
  "$PY" "$HARNESS/bench.py" run --client cmd --label loadgen --adapter loadgen --route generate -c "$CONC" \
    --gap-ms "$GAP" --max-tokens "$MAX_TOKENS" --requests "$REQUESTS" --out-root "$OUT_ROOT" --name "$name" \
    --timeout "$timeout" --fault-rate "$RATE" --fault-seed "$SEED" --fault-skip "$SKIP" $(fault_flags "$f") \
    --cmd "$cmd" >&2 || echo "== $name: bench.py exited $?" >&2
done
"$PY" "$HARNESS/bench.py" ftable "${dirs[@]}"
