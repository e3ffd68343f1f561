"""`loadgen` command line: capacity | run | query | report | emulate.

Every user error is printed as one line naming the problem and the fix, with exit code 2.
"""

from __future__ import annotations

import argparse
import sys

from loadgen.errors import LoadgenError


def _capacity(args: argparse.Namespace) -> int:
    from loadgen.capacity import run_capacity
    return run_capacity(args.config, args.results, args.ray_address)


def _query(args: argparse.Namespace) -> int:
    from loadgen import analysis
    con = analysis.open_results(args.results, args.run or None)
    print(analysis.render(analysis.run_query(con, args.name), args.format))
    return 0


def _report(args: argparse.Namespace) -> int:
    from loadgen.report import write_report
    write_report(args.results, args.run or None, args.output, args.markdown)
    print(f"wrote {args.output}" + (f" and {args.markdown}" if args.markdown else ""))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="loadgen", description="Capacity testing for LLM servers with "
                                     "speculative decoding: Ray load workers, every frame in Parquet, DuckDB SQL.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("capacity", help="run an experiment file (same as python -m jobs.capacity)")
    p.add_argument("--config", required=True, help="experiment TOML file")
    p.add_argument("--results", help="results folder (default: run.results in the file, else ./results)")
    p.add_argument("--ray-address", help="Ray cluster to join (default: $RAY_ADDRESS, else a local Ray)")
    p.set_defaults(func=_capacity)

    p = sub.add_parser("query", help="run one of the SQL files in queries/ over a results folder")
    p.add_argument("name", help="query name (file stem in queries/, e.g. compare_algorithms)")
    p.add_argument("--results", default="results", help="results folder (default ./results)")
    p.add_argument("--run", action="append", help="limit to this run id (repeatable)")
    p.add_argument("--format", choices=("table", "csv", "json"), default="table")
    p.set_defaults(func=_query)

    p = sub.add_parser("report", help="write a self-contained HTML report (and optional Markdown summary)")
    p.add_argument("--results", default="results", help="results folder (default ./results)")
    p.add_argument("--run", action="append", help="limit to this run id (repeatable)")
    p.add_argument("-o", "--output", default="report.html", help="HTML file to write")
    p.add_argument("--markdown", help="also write a Markdown summary here")
    p.set_defaults(func=_report)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["emulate"]:  # the emulator owns its flags (they mirror sglang.launch_server's)
        from loadgen.emulator.__main__ import main as emulate
        return emulate(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except LoadgenError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
