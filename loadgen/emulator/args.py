"""Command-line flags, named like `python -m sglang.launch_server`'s, plus the emulator's own."""

from __future__ import annotations

import argparse
import os

from loadgen.emulator.faults import add_fault_args
from loadgen.emulator.spec import ALGORITHMS


def positive_int(text: str) -> int:
    v = int(text)
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {v}")
    return v


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m loadgen.emulator",
        description="SGLang-compatible server with a speculative-decoding cost model (results are emulated).")
    g = p.add_argument_group("SGLang flags")
    g.add_argument("--model-path", required=True, help="reported as model_path; nothing is loaded")
    g.add_argument("--served-model-name", default=None)
    g.add_argument("--host", default="127.0.0.1")
    g.add_argument("--port", type=int, default=30000)
    g.add_argument("--speculative-algorithm", type=str.upper, choices=ALGORITHMS, default=None)
    g.add_argument("--speculative-num-steps", type=positive_int, default=None)
    g.add_argument("--speculative-eagle-topk", type=positive_int, default=None)
    g.add_argument("--speculative-num-draft-tokens", "--speculative-dflash-block-size",
                   dest="speculative_num_draft_tokens", type=positive_int, default=None)
    g.add_argument("--speculative-draft-model-path", default=None)
    g.add_argument("--max-running-requests", type=positive_int, default=64)
    g.add_argument("--max-queued-requests", type=positive_int, default=None)
    g.add_argument("--max-prefill-tokens", type=positive_int, default=16384,
                   help="prompt tokens one prefill forward may take (more new requests wait a forward)")
    g.add_argument("--min-free-slots-delay", type=int, default=None,
                   help="hold new prefills until N batch slots are free (default: SGLang's formula for DFLASH, "
                        "else off; <= 1 disables)")
    g.add_argument("--stream-interval", type=positive_int, default=1)
    g.add_argument("--incremental-streaming-output", action="store_true")
    g.add_argument("--enable-metrics", action="store_true")
    g.add_argument("--disable-radix-cache", action="store_true",
                   help="no prefix cache: every prompt is prefilled whole and cached_tokens is 0")
    g.add_argument("--enable-cache-report", action="store_true",
                   help="OpenAI routes report usage.prompt_tokens_details.cached_tokens")
    g.add_argument("--api-key", default=os.environ.get("LOADGEN_EMULATOR_API_KEY") or None,
                   help="or LOADGEN_EMULATOR_API_KEY in the environment (kept out of the process list)")
    g.add_argument("--decode-log-interval", type=positive_int, default=40)
    g.add_argument("--tool-call-parser", choices=("qwen25",), default=None,
                   help="chat streams a tool call as delta.tool_calls (finish_reason tool_calls); without it the "
                        "call is inline <tool_call>...</tool_call> content")
    g.add_argument("--reasoning-parser", choices=("qwen3", "deepseek-r1"), default=None,
                   help="chat streams thinking as delta.reasoning_content and counts usage.reasoning_tokens; "
                        "without it thinking is inline <think>...</think> content")
    e = p.add_argument_group("emulator flags")
    e.add_argument("--hardware", default="gb10", help="hardware profile name or .toml path (zero: no latency)")
    e.add_argument("--model-profile", default="qwen3.8-27b-nvfp4", help="model profile name or .toml path")
    e.add_argument("--algorithm-profile", default=None,
                   help="a .toml path replacing the algorithm's profile (draft cost, acceptance); its `draft` kind "
                        "must match the algorithm's (default: the profile of --speculative-algorithm)")
    e.add_argument("--seed", type=int, default=0, help="seeds acceptance draws, output lengths and faults")
    e.add_argument("--time-scale", type=float, default=1.0,
                   help="run the modelled hardware this many times faster (server times are real wall time)")
    e.add_argument("--startup-delay-s", type=float, default=0.0,
                   help="/health_generate answers 503 and /generate waits for this long after start")
    e.add_argument("--reuse-port", action="store_true",
                   help="SO_REUSEPORT: several emulator processes can share one port")
    e.add_argument("--reasoning-tokens", type=int, default=0,
                   help="the model thinks: each chat request's first N output tokens are <think> .. </think> "
                        "(unless chat_template_kwargs.enable_thinking is false); 0: it never thinks")
    e.add_argument("--tool-calls", type=int, default=1,
                   help="a chat request with tools answers with a tool call while fewer tool results than this follow "
                        "the last user message, then in prose (0: never calls)")
    e.add_argument("--log-level", default="warning")
    add_fault_args(p)
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    args = build_parser().parse_args(argv)
    if args.reasoning_tokens < 0 or args.reasoning_tokens == 1:
        build_parser().error(f"--reasoning-tokens must be 0 or >= 2 (<think> and </think>), "
                             f"got {args.reasoning_tokens}")
    if args.time_scale <= 0:
        build_parser().error(f"--time-scale must be > 0, got {args.time_scale}")
    if args.degraded_power_factor < 1:
        build_parser().error(f"--degraded-power-factor must be >= 1, got {args.degraded_power_factor}")
    if args.fault_keepalive_requests is not None and args.fault_keepalive_requests < 1:
        build_parser().error(f"--fault-keepalive-requests must be >= 1, got {args.fault_keepalive_requests}")
    return args
