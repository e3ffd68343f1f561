"""`loadgen` command line: capacity | run | query | report | check-draft | twin | plan | emulate.

Every user error is printed as one line naming the problem and the fix, with exit code 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from loadgen.driver import stop
from loadgen.errors import ConfigError, LoadgenError, user_message
from loadgen.results.slo import parse_slo_flag


def _capacity(args: argparse.Namespace) -> int:
    stop.install()   # before the slow imports: a stop signal from here on stops the run cleanly
    from loadgen.driver.capacity import run_capacity
    return run_capacity(args.config, args.results, args.ray_address, slo=args.slo, resume=args.resume)


def _adhoc(args: argparse.Namespace) -> int:
    """A one-off run from flags: one target, concurrency levels (or rates), a fixed number of requests."""
    stop.install()   # before the slow imports: a stop signal from here on stops the run cleanly
    from pathlib import Path

    from loadgen.driver import capacity  # noqa: F401  (first: it sets Ray's log options before Ray is imported)
    # isort: split
    from loadgen.config import parse_experiment
    from loadgen.driver import ray_setup, reach
    from loadgen.driver.runner import RunResult, run_experiment
    from loadgen.results import analysis
    from loadgen.results.folder import results_folder
    from loadgen.results.sink import check_writable
    experiment = adhoc_experiment(args)
    try:
        exp = parse_experiment(experiment, Path("."), "--flags")
    except ConfigError as exc:  # name the flag the user typed, not the config key it became
        flag = next((f for k, f in _FLAG_OF_KEY.items() if exc.key.startswith(k)), exc.key)
        if flag == "--slo" and exc.key.startswith("slo."):   # which of the flag's lines
            flag = f"--slo {exc.key.removeprefix('slo.')}"
        raise ConfigError(flag, exc.problem, exc.fix) from None
    folder = results_folder(args.results)
    check_writable(folder)
    reach.check_targets(exp)
    stop.check()   # a stop signal before Ray starts: there is no run to record
    print(f"results go to {folder}", flush=True)
    ray_setup.connect(args.ray_address)

    def report(result: RunResult) -> None:
        con = analysis.open_results(result.results_dir, [result.run_id])
        for name in ("throughput_by_concurrency", "latency_by_concurrency") + (("goodput",) if exp.slo else ()):
            print(analysis.render(analysis.run_query(con, name), "table"))
        if exp.slo:
            from loadgen.results.slo_answer import capacity_lines
            print("capacity " + "\n".join(capacity_lines(con)))
        print(f"results: {result.results_dir}")
    result = run_experiment(exp, str(folder), report=report, terminal=sys.stdout if sys.stdout.isatty() else None)
    return 0 if result.status == "complete" else 1


def adhoc_experiment(args: argparse.Namespace) -> dict[str, Any]:
    """`loadgen run`'s flags as an experiment table (checked by the same config code as a file)."""
    if (args.concurrency is None) == (args.rate is None):
        raise ConfigError("--concurrency", "give exactly one of --concurrency (closed loop) or --rate (open loop)",
                          "e.g. --concurrency 1 4 16, or --rate 0.5 1 2 --arrival poisson")
    load: dict[str, Any] = {"requests": args.requests, "workers_per_target": args.workers,
                            "flush_cache": args.flavor in ("sglang", "auto"), "stall_timeout_s": args.stall_timeout,
                            "request_timeout_s": args.request_timeout, "realtime_priority": args.realtime_priority}
    if args.rate is None:
        load["concurrency"] = args.concurrency
    else:
        load.update(mode="open", rates=args.rate, arrival=args.arrival or "poisson")
    if args.arrival is not None and args.rate is None:
        raise ConfigError("--arrival", "only applies to --rate (open loop)", "add --rate, or drop --arrival")
    target: dict[str, Any] = {"name": "target", "url": args.url, "flavor": args.flavor}
    if args.model is not None:
        target["model"] = args.model
    if args.api_key_env is not None:
        target["api_key_env"] = args.api_key_env
    if args.telemetry is not None:
        target["telemetry"] = args.telemetry
    prompts: dict[str, Any] = {"max_new_tokens": args.max_tokens, "ignore_eos": args.ignore_eos, "seed": args.seed}
    if args.prompts not in (None, "mix"):
        prompts["sources"] = [_prompt_source(args.prompts)]
    if args.input_tokens is not None:
        prompts["input_tokens"] = _input_tokens(args.input_tokens)
    experiment: dict[str, Any] = {"run": {"name": args.name}, "load": load, "prompts": prompts, "targets": [target]}
    if args.slo:
        experiment["slo"] = parse_slo_flag(args.slo)
    if args.error_budget is not None:
        b = args.error_budget   # a flag is always a float: 5 means a count, 0.05 a share
        load["error_budget"] = int(b) if b.is_integer() else b
    return experiment


def _prompt_source(text: str) -> dict[str, str]:
    """--prompts: a built-in kind (code, prose, a task family), conversation, agent, humaneval, or FORMAT:PATH of a
    dataset (loadgen/prompts/README)."""
    from loadgen.prompts.config import BUILTIN_TEMPLATES

    if text in BUILTIN_TEMPLATES or text in ("conversation", "agent"):
        return {"kind": text}
    if text == "humaneval":
        return {"format": "humaneval"}
    fmt, sep, path = text.partition(":")
    if not sep or not path:
        raise ConfigError("--prompts", f"{text!r} is neither a built-in mix nor FORMAT:PATH",
                          f"use {', '.join(BUILTIN_TEMPLATES)}, conversation, agent, mix (the default), humaneval, or "
                          "e.g. jsonl:prompts.jsonl")
    return {"format": fmt, "path": path}


def _input_tokens(text: str) -> int | dict[str, int]:
    """--input-tokens: N (fixed) or MIN-MAX (uniform); the numbers are checked by the config code."""
    low, sep, high = text.partition("-")
    try:
        return {"min": int(low), "max": int(high)} if sep else int(text)
    except ValueError:
        raise ConfigError("--input-tokens", f"{text!r} is neither a token count nor a range MIN-MAX",
                          "e.g. --input-tokens 1024, or --input-tokens 512-2048") from None


_FLAG_OF_KEY = {"load.concurrency": "--concurrency", "load.rates": "--rate", "load.arrival": "--arrival",
                "prompts.sources": "--prompts", "targets[0].model": "--model",
                "targets[0].api_key_env": "--api-key-env", "load.requests": "--requests",
                "load.workers_per_target": "--workers", "load.stall_timeout_s": "--stall-timeout",
                "load.request_timeout_s": "--request-timeout", "load.error_budget": "--error-budget",
                "prompts.max_new_tokens": "--max-tokens", "prompts.seed": "--seed", "run.name": "--name",
                "targets[0].url": "--url", "targets[0].flavor": "--flavor", "targets": "--url", "slo": "--slo",
                "targets[0].telemetry": "--telemetry",
                "prompts.input_tokens": "--input-tokens"}


def _query(args: argparse.Namespace) -> int:
    from loadgen.results import analysis
    if args.list:
        print(_query_list())
        return 0
    if args.name is None:
        raise LoadgenError("loadgen query: no query named; fix: give one, e.g. `loadgen query compare_algorithms`, "
                           "or see them all with `loadgen query --list`")
    con = analysis.open_results(args.results, args.run or None)
    params = analysis.parse_params(args.set or [])
    print(analysis.render(analysis.run_query(con, args.name, params), args.format))
    return 0


def _query_list() -> str:
    """Every query, one line each: its name and its description (read from its SQL file's header)."""
    from loadgen.results.analysis import query_descriptions
    found = query_descriptions()
    width = max(map(len, found))
    return "\n".join(f"{name.ljust(width)}  {text}" for name, text in found.items())


def _report(args: argparse.Namespace) -> int:
    import importlib.util

    from loadgen.results.report import write_report
    if importlib.util.find_spec("matplotlib") is None:
        raise LoadgenError("the report's plots need matplotlib, which is not installed "
                           "(fix: pip install 'loadgen[report]')")
    write_report(args.results, args.run or None, args.output, args.markdown)
    print(f"wrote {args.output}" + (f" and {args.markdown}" if args.markdown else ""))
    return 0


def _twin_fit(args: argparse.Namespace) -> int:
    from loadgen.twin.commands import fit_command
    return fit_command(args)


def _twin_predict(args: argparse.Namespace) -> int:
    from loadgen.twin.commands import predict_command
    return predict_command(args)


def _twin_refit(args: argparse.Namespace) -> int:
    from loadgen.twin.refit import refit_command
    return refit_command(args)


def _twin_parser(sub: Any) -> None:
    """`loadgen twin fit | predict | refit` (docs/twin.md)."""
    twin = sub.add_parser("twin", help="a twin of a measured target: fit it from a run, predict in virtual time")
    verbs = twin.add_subparsers(dest="verb", required=True)
    p = verbs.add_parser("fit", help="fit a twin to one target's measured levels of a run (>= 2 levels)")
    p.add_argument("--results", default="results", help="results folder (default ./results)")
    p.add_argument("--run", required=True, help="the run id to fit from (a grid or a closed-loop search)")
    p.add_argument("--target", help="the target to fit (default: the run's only one)")
    p.add_argument("--levels", type=int, nargs="+", help="fit to these levels only (default: every level of the "
                   "run); the others stay out, for twin_error to judge it on")
    p.add_argument("-o", "--output", required=True, help="the twin file to write (TOML)")
    p.add_argument("--hardware", help="the prior hardware profile, name or .toml (default: what an emulated "
                   "server says it ran, else gb10)")
    p.add_argument("--model-profile", help="the model profile, name or .toml (required for a real server: what "
                   "one token reads and computes)")
    p.add_argument("--algorithm-profile", help="the prior algorithm profile, name or .toml (default: the "
                   "algorithm's shipped one)")
    p.add_argument("--draft-tokens", type=int, help="tokens verified per step, where the server does not say "
                   "(llama.cpp: --spec-draft-n-max + 1)")
    p.set_defaults(func=_twin_fit)
    p = verbs.add_parser("predict", help="run an experiment on twins in virtual time (the tables, marked predicted)")
    p.add_argument("--config", help="an experiment whose targets are [targets.twin] tables")
    p.add_argument("--twin", help="or one twin file, with the flags below")
    p.add_argument("--concurrency", type=int, nargs="+", help="--twin: the levels to predict")
    p.add_argument("--slo", metavar="LINES", help="judge each level, e.g. ttft_ms=2000,tpot_ms=100")
    p.add_argument("--search-max", type=int, help="--twin with --slo: search the capacity up to this level")
    p.add_argument("--draft-tokens", type=int, help="--twin what-if: another draft budget")
    p.add_argument("--max-running", type=int, help="--twin what-if: another max running requests")
    p.add_argument("--kv-pool", type=int, help="--twin what-if: another KV pool (tokens)")
    p.add_argument("--max-tokens", type=int, help="--twin what-if: another output length (max_new_tokens)")
    p.add_argument("--name", help="--twin: the target's name (default: the twin's source target)")
    p.add_argument("--results", help="results folder (default: run.results in the file, else ./results)")
    p.set_defaults(func=_twin_predict)
    p = verbs.add_parser("refit", help="fit a twin again from a newer run of its node, with the drift shown")
    p.add_argument("twin", help="the twin file to refit (written in place, the old one kept beside it)")
    p.add_argument("--results", default="results", help="results folder (default ./results)")
    p.add_argument("--run", help="the run to refit from (default: the newest with a target that watched this twin "
                   "or is named as its source's)")
    p.add_argument("--target", help="the target of that run (default: the one that watched this twin)")
    p.add_argument("-o", "--output", help="write the refit twin here instead, leaving TWIN unchanged")
    p.set_defaults(func=_twin_refit)


def _plan(args: argparse.Namespace) -> int:
    from loadgen.campaigns.plan_command import plan_command
    return plan_command(args)


def _plan_parser(sub: Any) -> None:
    """`loadgen plan` (docs/planning.md)."""
    from loadgen.campaigns.plan_fleet import ROUTERS
    p = sub.add_parser("plan", help="how many nodes of which configuration for a demand at an SLO, from twins")
    p.add_argument("--twin", action="append", required=True, help="a twin file per configuration and node type "
                   "(repeatable; its name is the file's stem)")
    demand = p.add_mutually_exclusive_group(required=True)
    demand.add_argument("--users", type=int, help="the demand: concurrent users (closed loop)")
    demand.add_argument("--rate", type=float, help="the demand: requests/s arriving as a Poisson process (open loop)")
    demand.add_argument("--trace", help="the demand: a trace's peak rate (its busiest --peak-window), open loop")
    p.add_argument("--peak-window", type=float, default=60.0, help="--trace: the window its peak is read over, in "
                   "the trace's seconds (default 60)")
    p.add_argument("--speedup", type=float, default=1.0, help="--trace: replayed this many times faster (default 1)")
    p.add_argument("--slo", metavar="LINES", required=True, help="e.g. ttft_ms=2000,tpot_ms=80")
    p.add_argument("--config", help="an experiment whose [prompts] is the workload (default: the twins' own)")
    p.add_argument("--router", choices=ROUTERS, default=ROUTERS[0], help="how the user's router spreads requests "
                   "over the nodes (default least-outstanding)")
    p.add_argument("--max-nodes", type=int, default=64, help="the largest fleet to plan (default 64)")
    p.add_argument("--search-max", type=int, default=256, help="the most users one node is searched at, or their "
                   "request rate (default 256)")
    p.add_argument("--cost", action="append", metavar="[NAME:]PRICES", help="node_hour=2.1,energy_kwh=0.3 for "
                   "every configuration, or NAME:node_hour=3.9 for one (repeatable)")
    p.add_argument("--confirm", action="append", metavar="NAME=URL", help="measure one node of configuration NAME "
                   "at the plan's load per node and one above (repeatable); exit 1 when a plan does not hold")
    p.add_argument("--results", help="--confirm: results folder (default ./results)")
    p.add_argument("--ray-address", help="--confirm: the Ray cluster to join (default: $RAY_ADDRESS, else a local Ray)")
    p.set_defaults(func=_plan)


def _check_draft(args: argparse.Namespace) -> int:
    from loadgen.config import PROFILES_DIR, load_profile
    from loadgen.servers.draftcheck import run_check
    flags = load_profile(args.profile, PROFILES_DIR, "--profile").flags if args.profile else None
    return run_check(args.path, args.expect, flags)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="loadgen", description="Capacity testing for LLM servers with "
                                     "speculative decoding: Ray load workers, every frame in Parquet, DuckDB SQL.")
    from loadgen import __version__
    parser.add_argument("--version", action="version", version=f"loadgen {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("capacity", help="run an experiment file (same as python -m jobs.capacity)")
    p.add_argument("--config", required=True, help="experiment TOML file")
    p.add_argument("--results", help="results folder (default: run.results in the file, else ./results; under "
                   "`ray job submit`: ~/loadgen-results on the driver's node)")
    p.add_argument("--ray-address", help="Ray cluster to join (default: $RAY_ADDRESS, else a local Ray)")
    p.add_argument("--slo", metavar="LINES", help="judge each level against an SLO, e.g. "
                   "ttft_ms=2000,tpot_ms=100,attainment=0.9 (docs/capacity-search.md)")
    p.add_argument("--resume", metavar="RUN_ID", help="continue this stopped run with the same experiment "
                   "(docs/failures.md)")
    p.set_defaults(func=_capacity)

    p = sub.add_parser("run", help="ad-hoc run from flags: N requests at concurrency C against one URL")
    p.add_argument("--url", required=True, help="server root, e.g. http://127.0.0.1:30000")
    p.add_argument("--flavor", default="auto", help="API flavour: auto (default: identify the server: SGLang, "
                   "llama.cpp, vLLM, else a generic OpenAI server), sglang, openai-completions, openai-chat")
    p.add_argument("--concurrency", type=int, nargs="+", help="one or more levels (closed loop)")
    p.add_argument("--rate", type=float, nargs="+", help="one or more request rates per second (open loop, "
                   "instead of --concurrency)")
    p.add_argument("--arrival", choices=("poisson", "constant", "gamma"), help="open loop's arrivals "
                   "(default poisson)")
    p.add_argument("--model", help="openai flavours: the request's model (default: the server's first)")
    p.add_argument("--api-key-env", help="the environment variable holding the server's API key")
    p.add_argument("--telemetry", metavar="URL", help="the server's DCGM exporter, e.g. http://10.0.0.11:9400/metrics "
                   "(default: NVML when the url is on loopback; docs/telemetry.md)")
    p.add_argument("--prompts", help="code, prose, mix (default: both), a task family (translation, summarization, "
                   "qa, math, rag), conversation, agent, humaneval, or a dataset as FORMAT:PATH (jsonl, sharegpt, "
                   "question-jsonl; loadgen/prompts/README.md, docs/workloads.md)")
    p.add_argument("--input-tokens", metavar="N|MIN-MAX", help="each prompt's length in the server's own tokens: "
                   "fixed, or uniform in a range (calibrated against the server first; docs/experiments.md)")
    p.add_argument("--requests", type=int, required=True, help="requests per level")
    p.add_argument("--max-tokens", type=int, default=128, help="max_new_tokens (ignore_eos is on unless "
                   "--no-ignore-eos)")
    p.add_argument("--no-ignore-eos", dest="ignore_eos", action="store_false",
                   help="let the model stop at its end-of-sequence token (default: ignore it, every request "
                        "generates --max-tokens)")
    p.add_argument("--workers", type=int, default=1, help="worker actors (each holds its share of streams)")
    p.add_argument("--seed", type=int, default=0, help="prompt sequence seed")
    p.add_argument("--stall-timeout", type=float, default=60.0, help="cut a request after this many seconds "
                   "without data (default 60)")
    p.add_argument("--request-timeout", type=float, default=900.0, help="cut a request after this many "
                   "seconds in total (default 900)")
    p.add_argument("--error-budget", type=float, default=None, help="stop the run when a step has more failed "
                   "requests than this (a count >= 1, or a fraction < 1 of the step's requests; default: never)")
    p.add_argument("--no-realtime-priority", dest="realtime_priority", action="store_false",
                   help="keep the workers' reading thread at normal priority (for a client sharing cores with "
                        "the server under test; see docs/instrument.md)")
    p.add_argument("--name", default="adhoc", help="run name (part of the run id)")
    p.add_argument("--results", help="results folder (default ./results; under `ray job submit`: "
                   "~/loadgen-results on the driver's node)")
    p.add_argument("--ray-address", help="Ray cluster to join (default: $RAY_ADDRESS, else a local Ray)")
    p.add_argument("--slo", metavar="LINES", help="judge each level against an SLO, e.g. "
                   "ttft_ms=2000,tpot_ms=100,attainment=0.9 (docs/capacity-search.md)")
    p.set_defaults(func=_adhoc)

    p = sub.add_parser("query", help="run one of the SQL files in queries/ over a results folder",
                       description="Run one of the SQL files in queries/ over a results folder.",
                       epilog="queries:\n" + _query_list(), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", nargs="?", help="query name (file stem in queries/, e.g. compare_algorithms)")
    p.add_argument("--list", action="store_true", help="name every query with what it answers, and exit")
    p.add_argument("--results", default="results", help="results folder (default ./results)")
    p.add_argument("--run", action="append", help="limit to this run id (repeatable)")
    p.add_argument("--format", choices=("table", "csv", "json"), default="table")
    p.add_argument("--set", action="append", metavar="NAME=VALUE",
                   help="a query parameter (repeatable), e.g. --set baseline=mtp --set outlier_pct=10; "
                        "the list: queries/README.md")
    p.set_defaults(func=_query)

    p = sub.add_parser("report", help="write a self-contained HTML report (and optional Markdown summary)")
    p.add_argument("--results", default="results", help="results folder (default ./results)")
    p.add_argument("--run", action="append", help="limit to this run id (repeatable)")
    p.add_argument("-o", "--output", default="report.html", help="HTML file to write")
    p.add_argument("--markdown", help="also write a Markdown summary here")
    p.set_defaults(func=_report)

    p = sub.add_parser("check-draft", help="will SGLang run this DFlash draft as DFlash2, or silently as DFlash1?")
    p.add_argument("path", help="the draft model folder, or its config.json")
    p.add_argument("--expect", choices=("dflash1", "dflash2"), help="exit 1 unless the draft is this kind")
    p.add_argument("--profile", help="also check a launch profile's flags against the draft (name in "
                   "infra/profiles/ or a .toml path)")
    p.set_defaults(func=_check_draft)
    _twin_parser(sub)
    _plan_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["emulate"]:  # the emulator owns its flags (they mirror sglang.launch_server's)
        from loadgen.emulator.__main__ import main as emulate
        emulate(argv[1:])
        return 0
    args = build_parser().parse_args(argv)
    try:
        code = args.func(args)
        sys.stdout.flush()   # a closed pipe fails here, in the handler below, not in Python's flush at exit
        return code
    except LoadgenError as exc:
        print(f"error: {user_message(exc)}", file=sys.stderr)
        return 2
    except stop.Stopped as exc:   # Ctrl-C or SIGTERM during `capacity` or `run` (loadgen.driver.stop)
        print(exc.message(resumable=args.func is _capacity), file=sys.stderr)
        return exc.exit_code
    except BrokenPipeError:   # the reader went away (`loadgen query --list | head`): the rest is not wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())   # so that the flush at exit cannot fail
        return 1
    except KeyboardInterrupt:   # Ctrl-C in a command that runs nothing (query, report, check-draft)
        return 130


if __name__ == "__main__":
    sys.exit(main())
