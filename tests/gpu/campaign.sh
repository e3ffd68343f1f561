#!/usr/bin/env bash
# The GPU campaign (docs/real-gpu.md): llama-server built with CUDA, a drafted and a plain server on one GPU, and
# loadgen measuring both as a user would (a real Ray, `python -m jobs.capacity`, NVML telemetry), plus counted
# runs whose every figure is checked against the server's own counters and log (tests/gpu/gpu_truth.py).
#
#   tests/gpu/campaign.sh build   STAGE   # llama.cpp (STAGE/llama.cpp.tar.xz) -> $WORK/bin/llama-server (~4 min)
#   tests/gpu/campaign.sh install STAGE   # STAGE/chunks/payload.* -> the draft GGUF and the wheels in $WORK/site
#   tests/gpu/campaign.sh measure OUT     # serve, then PHASES (default "sweep truth"); packed into OUT
#   tests/gpu/campaign.sh all STAGE OUT   # the three in order (a machine that holds the whole stage)
#
# STAGE comes from tests/gpu/stage.sh (on a machine that reaches PyPI). $WORK defaults to /tmp/loadgen-gpu;
# CUDA_ARCH (default: the GPU's own, from nvidia-smi) picks the build's architecture. Nothing here changes the
# GPU's settings. The analysis of OUT (twin fits, predictions, the truth tables) runs anywhere:
# tests/gpu/analyse.sh OUT (docs/real-gpu.md).
set -euo pipefail
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
WORK="${LOADGEN_GPU_WORK:-/tmp/loadgen-gpu}"
REPEAT="${STACK_REPEAT:-4}"          # the target: SmolLM2-135M with every block repeated this many times
DRAFT_MAX="${DRAFT_MAX:-4}"          # llama-server --spec-draft-n-max
SLOTS="${SLOTS:-32}"
LEVELS="${LEVELS:-1, 2, 4, 8, 16, 32}"      # the sweep's concurrency levels
MAX_TOKENS="${MAX_TOKENS:-256}"
mkdir -p "$WORK"
log() { printf '[campaign %s] %s\n' "$(date +%T)" "$*" >&2; }

build() {
  local stage="$1" arch="${CUDA_ARCH:-}"
  [[ -x "$WORK/bin/llama-server" ]] && { log "llama-server already built"; return; }
  [[ -n "$arch" ]] || arch="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n1 | tr -d '.')"
  rm -rf "$WORK/src" && mkdir -p "$WORK/src" "$WORK/bin"
  tar xJf "$stage/llama.cpp.tar.xz" -C "$WORK/src"
  local start=$SECONDS
  log "configuring llama.cpp for CUDA sm_$arch"
  cmake -S "$WORK/src/llama.cpp" -B "$WORK/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="$arch" -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DBUILD_SHARED_LIBS=OFF >"$WORK/configure.log" 2>&1 \
    || { tail -n 30 "$WORK/configure.log"; exit 1; }
  cmake --build "$WORK/build" --target llama-server -j "$(nproc)" >"$WORK/build.log" 2>&1 \
    || { tail -n 30 "$WORK/build.log"; exit 1; }
  cp "$WORK/build/bin/llama-server" "$WORK/bin/llama-server"
  log "llama-server built in $((SECONDS - start)) s: $("$WORK/bin/llama-server" --version 2>&1 | tail -n 2 | tr '\n' ' ')"
}

install() {
  local stage="$1"
  [[ -f "$WORK/site/.done" ]] && { log "dependencies already installed"; return; }
  mkdir -p "$WORK/payload" && cat "$stage"/chunks/payload.* | tar xf - -C "$WORK/payload"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$WORK/site" \
    "$WORK"/payload/whl/*.whl
  touch "$WORK/site/.done"
  log "installed $(ls "$WORK"/payload/whl/*.whl | wc -l) wheels into $WORK/site"
}

wait_healthy() {
  local url="$1" pid="$2" deadline=$((SECONDS + 300))
  until python3 -c "import urllib.request,sys; urllib.request.urlopen(sys.argv[1] + '/health', timeout=2)" "$url" 2>/dev/null; do
    kill -0 "$pid" 2>/dev/null || { log "server $url exited"; return 1; }
    (( SECONDS < deadline )) || { log "server $url not healthy in 300 s"; return 1; }
    sleep 1
  done
}

# both servers on the GPU with the given extra flags (e.g. --kv-unified); `stop_servers` ends them
serve() {
  local draft="$WORK/payload/draft.gguf" target="$WORK/target-x$REPEAT.gguf" tag="$1"; shift
  [[ -f "$target" ]] || python3 "$REPO/tests/gpu/stack_gguf.py" "$draft" "$target" --repeat "$REPEAT" \
    --gguf-py "$WORK/src/llama.cpp/gguf-py"
  local common=(-m "$target" -ngl 999 -np "$SLOTS" -c $((SLOTS * 2048)) --metrics --host 127.0.0.1 --no-webui "$@")
  "$WORK/bin/llama-server" "${common[@]}" --port 18080 >"$WORK/run/plain$tag.log" 2>&1 & PLAIN=$!
  "$WORK/bin/llama-server" "${common[@]}" --port 18081 -md "$draft" -ngld 999 --spec-type draft-simple \
    --spec-draft-n-max "$DRAFT_MAX" >"$WORK/run/drafted$tag.log" 2>&1 & DRAFTED=$!
  trap stop_servers EXIT
  wait_healthy http://127.0.0.1:18080 $PLAIN && wait_healthy http://127.0.0.1:18081 $DRAFTED
  log "servers up ($tag${*:+: $*}): plain (pid $PLAIN), drafted (pid $DRAFTED) on $(nvidia-smi --query-gpu=name --format=csv,noheader)"
}

stop_servers() { kill "${PLAIN:-}" "${DRAFTED:-}" 2>/dev/null || true; wait "${PLAIN:-}" "${DRAFTED:-}" 2>/dev/null || true; }

# one jobs.capacity sweep: run name, levels, repeats
sweep() {
  local name="$1" levels="$2" repeats="$3"
  sed -e "s/@NAME@/$name/" -e "s/@LEVELS@/$levels/" -e "s/@REPEATS@/$repeats/" -e "s/@MAX_TOKENS@/$MAX_TOKENS/" \
    "$REPO/tests/gpu/gpu-sweep.toml" > "$WORK/run/$name.toml"
  (cd "$REPO" && python3 -m jobs.capacity --config "$WORK/run/$name.toml" --results "$WORK/results") \
    2>&1 | tee "$OUT_DIR/$name.log"
}

# counted runs checked against the servers' own counters and logs: drafted first (the one the truth lacked)
truth() {
  local tag="$1"
  (cd "$REPO" && python3 tests/gpu/gpu_truth.py run --results "$WORK/results" --out "$OUT_DIR" \
    --server drafted=http://127.0.0.1:18081="$WORK/run/drafted$tag.log" \
    --server plain=http://127.0.0.1:18080="$WORK/run/plain$tag.log") 2>&1 | tee "$OUT_DIR/truth-run.log"
}

# PHASES (default "sweep truth"): sweep, truth (both on the default servers), unified (the sweep again with one
# KV cache for all slots, `--kv-unified`), repeat (a third repeat at REPEAT_LEVELS on the default servers)
measure() {
  OUT_DIR="$1"
  export PYTHONPATH="$WORK/site${PYTHONPATH:+:$PYTHONPATH}" PATH="$WORK/site/bin:$PATH" PYTHONUNBUFFERED=1
  export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 LOADGEN_GIT_COMMIT="${LOADGEN_GIT_COMMIT:-$(git -C "$REPO" rev-parse HEAD 2>/dev/null || echo unknown)}"
  mkdir -p "$OUT_DIR" "$WORK/run"
  nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > "$OUT_DIR/gpu.csv"
  "$WORK/bin/llama-server" --version > "$OUT_DIR/llama-version.txt" 2>&1 || true
  local phase served=""
  for phase in ${PHASES:-sweep truth}; do
    case "$phase" in
      sweep|truth|repeat) [[ "$served" == default ]] || { stop_servers; serve "" ; served=default; } ;;
      unified) [[ "$served" == unified ]] || { stop_servers; serve "-kvu" --kv-unified; served=unified; } ;;
      *) log "unknown phase $phase"; return 2 ;;
    esac
    case "$phase" in
      sweep) sweep gpu-sweep "$LEVELS" 2 ;;
      truth) truth "" ;;
      unified) sweep gpu-sweep-kvu "$LEVELS" "${UNIFIED_REPEATS:-1}" ;;
      repeat) sweep gpu-sweep-r3 "${REPEAT_LEVELS:-8, 16}" 1 ;;
    esac
    cp "$WORK/run/"*.log "$WORK/run/"*.toml "$OUT_DIR/" 2>/dev/null || true
    tar czf "$OUT_DIR/results.tar.gz" -C "$WORK" results   # after every phase: a cut campaign keeps what ended
    log "phase $phase done: $(du -sh "$OUT_DIR/results.tar.gz" | cut -f1) of results in $OUT_DIR"
  done
  stop_servers
}

case "${1:-}" in
  build) build "$2" ;;
  install) install "$2" ;;
  measure) measure "$2" ;;
  all) build "$2"; install "$2"; measure "$3" ;;
  *) sed -n '2,14p' "$0"; exit 2 ;;
esac
