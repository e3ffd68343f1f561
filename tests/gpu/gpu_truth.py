"""Counted runs against real llama-servers, each figure kept beside the server's own (tests/gpu/campaign.sh).

    python3 tests/gpu/gpu_truth.py run --results DIR --out OUT --server NAME=URL=LOGFILE [--server ...]
    python3 tests/gpu/gpu_truth.py tables OUT

`run` sends, per server and level, a counted run (every request measured, none cut) through loadgen's own driver
and keeps what the server says around it: its /metrics before and after, and the lines its log printed (each
request's prompt and eval times and drafts accepted). `tables` prints loadgen's figures against those: tokens,
acceptance, decode rate, TTFT against the prompt time, and the GPU energy counter against the power integrated
over each step's window (from the same results folder's sweep). It reads only the results and OUT, so it runs
anywhere, not only where the GPU is.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import urllib.request
from pathlib import Path

REPO = Path(__file__).parents[2]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from llamaserver import server_log_timings  # noqa: E402

# concurrency -> requests; LOADGEN_TRUTH_LEVELS="1:8,8:32" and MAX_TOKENS for a short trial on a CPU
LEVELS = {int(c): int(n) for c, n in (pair.split(":") for pair in
                                      os.environ.get("LOADGEN_TRUTH_LEVELS", "1:8,8:32,32:64").split(","))}
MAX_TOKENS = int(os.environ.get("MAX_TOKENS", "256"))


def metrics(url: str) -> dict[str, float]:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and "{" not in line:
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def run(args: argparse.Namespace) -> int:
    import ray

    from loadgen.config import parse_experiment
    from loadgen.driver import ray_setup
    from loadgen.driver.runner import run_experiment

    ray_setup.connect(None)
    records = []
    for spec in args.server:
        name, url, log_path = spec.split("=", 2)
        for concurrency, n in LEVELS.items():
            exp = parse_experiment({
                "run": {"name": f"truth-{name}-c{concurrency}"},
                "load": {"concurrency": [concurrency], "requests": n, "request_timeout_s": 300.0},
                "prompts": {"seed": 100 + concurrency, "max_new_tokens": MAX_TOKENS, "ignore_eos": True,
                            "temperature": 0.0,
                            "sources": [{"kind": "code", "weight": 0.5}, {"kind": "prose", "weight": 0.5}]},
                "targets": [{"name": name, "url": url, "node": "gpu"}],
            }, Path("."))
            log_at = Path(log_path).stat().st_size
            before = metrics(url)
            outcome = run_experiment(exp, args.results, log=print)
            after = metrics(url)
            with open(log_path, "rb") as f:
                f.seek(log_at)
                logged = server_log_timings(f.read().decode("utf-8", "replace"))
            records.append({"server": name, "concurrency": concurrency, "requests": n, "run_id": outcome.run_id,
                            "status": outcome.status, "before": before, "after": after, "logged": logged})
            print(f"{name} C={concurrency}: {outcome.status}, {len(logged)} requests in the server's log")
    Path(args.out, "truth.json").write_text(json.dumps(records, indent=1))
    ray.shutdown()
    return 0


def _rows(con, sql: str, params: list) -> list[dict]:
    cur = con.execute(sql, params)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r)) for r in cur.fetchall()]


def _pct(ours: float, theirs: float) -> str:
    return f"{100 * (ours / theirs - 1):+.2f}%" if theirs else "n/a"


def tables(args: argparse.Namespace) -> int:
    from loadgen.results import analysis

    out = Path(args.out)
    records = json.loads((out / "truth.json").read_text())
    results = str(out / "results")
    con = analysis.open_results(results, [r["run_id"] for r in records])
    print("## Tokens: loadgen's rows against the server's counters (the drafting probe's own tokens taken out)\n")
    print("| server | C | requests | output tokens loadgen / server | prompt tokens loadgen / server |")
    print("|---|---|---|---|---|")
    acc_lines, rate_lines = [], []
    for r in records:
        run_id = r["run_id"]
        [info] = _rows(con, "SELECT any_value(server_info) AS info FROM steps WHERE run_id = ?", [run_id])
        probe = json.loads(info["info"]).get("speculative_observed") or {}
        moved = probe.get("counters", {})
        delta = {k: r["after"][k] - r["before"].get(k, 0.0) - moved.get(k, 0.0) for k in r["after"]}
        [tot] = _rows(con, "SELECT count(*) AS n, sum(completion_tokens) AS out, sum(prompt_tokens) AS prompt, "
                           "sum(spec_verify_ct) AS verify, count(*) FILTER (status = 'ok') AS ok "
                           "FROM requests WHERE run_id = ?", [run_id])
        logged = r["logged"][1:] if probe else r["logged"]   # the probe is the server's first task of a run
        print(f"| {r['server']} | {r['concurrency']} | {tot['ok']}/{tot['n']} ok | {tot['out']} / "
              f"{delta.get('llamacpp:tokens_predicted_total', float('nan')):.0f} | {tot['prompt']} / "
              f"{delta.get('llamacpp:prompt_tokens_total', float('nan')):.0f} |")
        drafted = sum(t.get("drafted", 0) for t in logged)
        if drafted:
            accepted = sum(t.get("accepted", 0) for t in logged)
            verify_log = sum(t["gen_n"] - 1 - t.get("accepted", 0) for t in logged)
            counted = delta.get("llamacpp:spec_decode_num_accepted_tokens_total", 0.0)
            counted_drafts = max(1.0, delta.get("llamacpp:spec_decode_num_draft_tokens_total", 0.0))
            acc_lines.append(
                f"| {r['server']} | {r['concurrency']} | {tot['out'] / tot['verify']:.4f} | "
                f"{sum(t['gen_n'] for t in logged) / verify_log:.4f} | {accepted / drafted:.4f} | "
                f"{counted / counted_drafts:.4f} |")
        ours = _rows(con, "SELECT prompt_tokens AS p, completion_tokens AS n, t_sent_ns, "
                          "(t_first_token_ns - t_sent_ns) / 1e6 AS ttft_ms, "
                          "(t_last_token_ns - t_first_token_ns) / 1e6 AS gen_ms FROM requests WHERE run_id = ? "
                          "ORDER BY prompt_tokens, t_sent_ns", [run_id])
        theirs = sorted(logged, key=lambda t: (t["prompt_n"], t["task"]))
        if [o["p"] for o in ours] != [t["prompt_n"] for t in theirs]:
            rate_lines.append(f"| {r['server']} | {r['concurrency']} | requests do not pair by prompt length |")
            continue
        our_rate = sum(o["n"] - 1 for o in ours) / sum(o["gen_ms"] for o in ours) * 1e3
        their_rate = sum(t["gen_n"] - 1 for t in theirs) / sum(t["gen_ms"] for t in theirs) * 1e3
        gap = [o["ttft_ms"] - t["prompt_ms"] for o, t in zip(ours, theirs)]
        rate_lines.append(
            f"| {r['server']} | {r['concurrency']} | {our_rate:.1f} / {their_rate:.1f} ({_pct(our_rate, their_rate)}) "
            f"| {statistics.median(o['ttft_ms'] for o in ours):.1f} | "
            f"{statistics.median(t['prompt_ms'] for t in theirs):.1f} | {statistics.median(gap):+.1f} "
            f"({min(gap):+.1f}..{max(gap):+.1f}) |")
    print("\n## Acceptance: loadgen's against the server's log and counters\n")
    print("| server | C | loadgen accept length | from the server's log | log: accepted / drafted "
          "| counters: accepted / draft tokens |")
    print("|---|---|---|---|---|---|")
    print("\n".join(acc_lines))
    print("\n## Decode rate and TTFT against the server's own timings (per request, paired by prompt length)\n")
    print("| server | C | decode tok/s per request, loadgen / server | TTFT p50 ms | server prompt time p50 ms "
          "| TTFT - prompt time, median (range) ms |")
    print("|---|---|---|---|---|---|")
    print("\n".join(rate_lines))
    energy(results)
    return 0


def energy(results: str) -> None:
    """The NVML total-energy counter over each step's samples against the power readings integrated over the
    same samples (trapezoids)."""
    import duckdb
    con = duckdb.connect()
    con.execute(f"CREATE VIEW g AS SELECT * FROM read_parquet('{results}/gpu_samples/**/*.parquet', "
                "hive_partitioning = true)")
    rows = con.execute("""
        WITH s AS (SELECT run_id, step_id, target, t_ns, power_w, energy_j,
                          lag(t_ns) OVER w AS t0, lag(power_w) OVER w AS p0, lag(energy_j) OVER w AS e0
                   FROM g WHERE step_id IS NOT NULL AND run_id LIKE 'gpu-sweep%' WINDOW w AS (
                       PARTITION BY run_id, step_id, target, gpu ORDER BY t_ns))
        SELECT step_id, target, count(*) AS samples, sum(energy_j - e0) AS counter_j,
               sum((power_w + p0) / 2 * (t_ns - t0) / 1e9) AS integrated_j,
               sum(t_ns - t0) / 1e9 AS seconds
        FROM s WHERE t0 IS NOT NULL GROUP BY ALL ORDER BY step_id, target""").fetchall()
    print("\n## Energy per step: NVML's counter against power integrated over the same samples\n")
    print("| step | target | samples | seconds | counter J | integrated J | difference |")
    print("|---|---|---|---|---|---|---|")
    for step, target, n, counter, integrated, seconds in rows:
        print(f"| {step} | {target} | {n} | {seconds:.1f} | {counter:.0f} | {integrated:.0f} | "
              f"{_pct(counter, integrated)} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("run")
    p.add_argument("--results", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--server", action="append", required=True, help="NAME=URL=LOGFILE")
    p.set_defaults(func=run)
    p = sub.add_parser("tables")
    p.add_argument("out")
    p.set_defaults(func=tables)
    args = ap.parse_args()
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
