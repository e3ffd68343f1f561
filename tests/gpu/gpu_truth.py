"""Counted runs against real llama-servers, each figure kept beside the server's own (tests/gpu/campaign.sh).

    python3 tests/gpu/gpu_truth.py run --results DIR --out OUT --server NAME=URL=LOGFILE [--server ...]
    python3 tests/gpu/gpu_truth.py tables OUT [--results DIR] [--logs DIR]

`run` sends, per server and level, a counted run (every request measured, none cut) through loadgen's own driver
and keeps what the server says around it: its /metrics before and after, and the lines its log printed (each
request's prompt and eval times and drafts accepted). `tables` prints loadgen's figures against those: tokens,
acceptance, decode rate, TTFT against the prompt time, and the GPU energy counter against the power integrated
over each step's window (from the same results folder's sweep). It reads only the results and OUT, so it runs
anywhere, not only where the GPU is.

Where OUT holds no truth.json (the counted runs did not run), `tables` works from every step in the results
folder instead: per step, loadgen's requests against the deltas of the server's counters between the step's first
and last /metrics sample (server_samples), and each request paired with its line in the server's log (OUT/run/
NAME.log or OUT/NAME.log) by the clock: the log's timestamps are the server's time since start, so one offset
(found from the requests whose output and prompt lengths both match) maps them onto loadgen's clock, and each
request takes the log entry of its output length that ended nearest its last token (within 50 ms).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tarfile
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
            Path(args.out, "truth.json").write_text(json.dumps(records, indent=1))   # a cut campaign keeps these
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
    results = str(args.results or out / "results")
    if not Path(results, "runs").is_dir() and (out / "results.tar.gz").is_file():
        with tarfile.open(out / "results.tar.gz") as tar:
            tar.extractall(out, filter="data")
    if not (out / "truth.json").is_file():
        print(f"(no {out / 'truth.json'}: the counted runs did not run; the tables come from every step of "
              f"{results})\n")
        return sweep_tables(results, Path(args.logs) if args.logs else _logs_dir(out))
    records = json.loads((out / "truth.json").read_text())
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


# llama-server's log: `M.SS.mmm.uuu` (the time since it started) on each line; a request's `eval time` line ends it
_STAMPED = re.compile(
    r"^(\d+)\.(\d+)\.(\d+)\.(\d+) .*?task (\d+) \| +(eval time|graphs reused = +[\d.]+|processing task)", re.M)
PAIR_TOLERANCE_S = 0.05


def _logs_dir(out: Path) -> Path:
    return out / "run" if (out / "run").is_dir() else out


def log_requests(path: Path) -> list[dict]:
    """Each request the server's log ended (server_log_timings), with when it ended on the server's clock and the
    context's `graphs reused` count then. Requests cancelled by their client print no timings: they are absent."""
    text = path.read_text(errors="replace")
    tasks = {t["task"]: t for t in server_log_timings(text)}
    for m in _STAMPED.finditer(text):
        t = tasks.get(int(m[5]))
        if t is None:
            continue
        at = int(m[1]) * 60 + int(m[2]) + int(m[3]) / 1e3 + int(m[4]) / 1e6
        if m[6] == "eval time":
            t["end_s"] = at
        elif m[6] == "processing task":
            t["launch_s"] = at
        else:
            t["graphs_reused"] = int(float(m[6].rpartition("=")[2]))
    return sorted((t for t in tasks.values() if "end_s" in t), key=lambda t: t["end_s"])


def pair_by_clock(ours: list[dict], theirs: list[dict]) -> tuple[float, dict[str, dict], list[float]]:
    """The offset from the server's log clock to loadgen's (seconds), the log entry of each of `ours` (keyed by
    request_id) and the residuals (ms). The offset is the mode, then the median, of last token minus log end over
    the candidate pairs whose output and prompt lengths both match; then each request takes the unused log entry
    of its output length that ended nearest its last token, within PAIR_TOLERANCE_S."""
    from collections import Counter
    cands = [o["t_last_s"] - t["end_s"] for o in ours for t in theirs
             if o["n"] == t["gen_n"] and o["p"] == t["prompt_n"]]
    if not cands:
        return float("nan"), {}, []
    mode = Counter(round(c / 0.02) for c in cands).most_common(1)[0][0] * 0.02
    offset = statistics.median(c for c in cands if abs(c - mode) <= PAIR_TOLERANCE_S)
    by_len: dict[int, list[dict]] = {}
    for t in theirs:
        by_len.setdefault(t["gen_n"], []).append(t)
    paired, used, resid = {}, set(), []
    for o in sorted(ours, key=lambda o: o["t_last_s"]):
        # a prompt the server found partly in its cache is shorter in its log: equal lengths first
        best = min((t for t in by_len.get(o["n"], []) if t["task"] not in used and t["prompt_n"] <= o["p"]),
                   key=lambda t: abs(o["t_last_s"] - offset - t["end_s"]) + 0.025 * (t["prompt_n"] != o["p"]),
                   default=None)
        if best is not None and abs(o["t_last_s"] - offset - best["end_s"]) <= PAIR_TOLERANCE_S:
            used.add(best["task"])
            paired[o["request_id"]] = best
            resid.append(1e3 * (o["t_last_s"] - offset - best["end_s"]))
    return offset, paired, resid


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.0f}"


def _table(head: list[str], rows: list[list]) -> None:
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        print("| " + " | ".join(str(x) for x in r) + " |")


def sweep_tables(results: str, logs: Path) -> int:
    """The truth tables from every step of the results folder (no counted runs): see the module's doc."""
    import duckdb
    con = duckdb.connect()
    for view in ("requests", "steps", "server_samples"):
        con.execute(f"CREATE VIEW {view} AS SELECT * FROM read_parquet('{results}/{view}/**/*.parquet', "
                    "hive_partitioning = true, union_by_name = true)")
    steps = _rows(con, "SELECT run_id, step_id, target, concurrency AS c, repeat, status, algorithm "
                       "FROM steps WHERE predicted IS NOT TRUE ORDER BY run_id, step_id, target", [])
    counters = {}
    for r in _rows(con, """
            SELECT run_id, step_id, target, name, arg_min(value, t_ns) AS v0, arg_max(value, t_ns) AS v1,
                   min(t_ns) AS t0, max(t_ns) AS t1
            FROM server_samples WHERE labels IS NULL OR labels IN ('', '{}') GROUP BY ALL""", []):
        c = counters.setdefault((r["run_id"], r["step_id"], r["target"]), {"t0": r["t0"], "t1": r["t1"]})
        c[r["name"].removeprefix("llamacpp:")] = r["v1"] - r["v0"]
    reqs = _rows(con, """
        SELECT run_id, step_id, target, request_id, phase, status, prompt_tokens AS p, completion_tokens AS n,
               prompt_id,
               spec_verify_ct AS verify, t_sent_ns / 1e9 AS t_sent_s, t_last_token_ns / 1e9 AS t_last_s,
               (t_first_token_ns - t_sent_ns) / 1e6 AS ttft_ms,
               (t_last_token_ns - t_first_token_ns) / 1e6 AS gen_ms
        FROM requests WHERE run_id NOT IN (SELECT run_id FROM steps WHERE predicted)
        ORDER BY t_sent_ns""", [])
    prompt_len = {r["prompt_id"]: r["p"] for r in reqs if r["status"] == "ok"}
    # each target's log, paired with its requests over every run in the folder
    paired, offsets, notes = {}, {}, []
    for target in sorted({r["target"] for r in steps}):
        path = logs / f"{target}.log"
        if not path.is_file():
            notes.append(f"no log {path}: {target}'s requests are not paired")
            continue
        theirs = log_requests(path)
        ours = [r for r in reqs if r["target"] == target and r["status"] == "ok"]
        offset, pairs, resid = pair_by_clock(ours, theirs)
        offsets[target] = (offset, theirs)
        paired.update(pairs)
        same_p = sum(paired[o["request_id"]]["prompt_n"] == o["p"] for o in ours if o["request_id"] in paired)
        notes.append(
            f"{target}: {len(pairs)} of {len(ours)} ok requests paired with {len(theirs)} log entries (the rest of "
            f"the log: the drafting probes and requests of runs the results do not hold); end-time residual median "
            f"{statistics.median(resid):+.1f} ms, max |{max(map(abs, resid)):.1f}| ms; prompt length equal in "
            f"{same_p} of {len(pairs)} pairs" if resid else f"{target}: nothing paired")
    print("## Pairing loadgen's requests with the servers' logs\n")
    print("\n".join(f"- {n}" for n in notes))

    tok_rows, acc_rows, rate_rows, graph_rows = [], [], [], []
    for st in steps:
        key = (st["run_id"], st["step_id"], st["target"])
        run = re.sub(r"-\d{8}T\d{6}-[0-9a-f]+$", "", st["run_id"])   # the run's name
        label = [run, st["step_id"], st["target"], st["c"], st["repeat"]]
        rs = [r for r in reqs if (r["run_id"], r["step_id"], r["target"]) == key]
        ok = [r for r in rs if r["status"] == "ok"]
        cut = len(rs) - len(ok)
        cn = counters.get(key, {})
        out_ours, p_ours = sum(r["n"] for r in ok), sum(r["p"] for r in ok)
        # a cut request's prompt length is the one the same prompt had where a request with it ended ok
        p_cut = sum(prompt_len.get(r["prompt_id"], 0) for r in rs if r["status"] != "ok")
        p_unknown = sum(r["prompt_id"] not in prompt_len for r in rs if r["status"] != "ok")
        out_srv, p_srv = cn.get("tokens_predicted_total"), cn.get("prompt_tokens_total")
        cached = cn.get("prompt_tokens_cached_total")
        # the log's entries that ended inside the step's sampled window (the server's clock mapped on loadgen's)
        off, theirs = offsets.get(st["target"], (float("nan"), []))
        in_win = [t for t in theirs if cn and cn["t0"] / 1e9 <= t["end_s"] + off <= cn["t1"] / 1e9]
        prs = [(r, paired[r["request_id"]]) for r in ok if r["request_id"] in paired]
        tok_rows.append(label + [
            f"{len(ok)} / {cut}", len(in_win), f"{out_ours} / {_num(out_srv)}", sum(t["gen_n"] for t in in_win),
            f"{p_ours} / {_num(p_srv)}", sum(t["prompt_n"] for t in in_win),
            f"{p_ours + p_cut}" + (f" ({p_unknown} unknown)" if p_unknown else ""), _num(cached),
            "no samples" if out_srv is None else "exact" if out_srv == out_ours else f"{out_srv - out_ours:+.0f}"])
        if st["algorithm"] not in (None, "NONE") and ok:
            verify = sum(r["verify"] or 0 for r in ok)
            log_acc = sum(t.get("accepted", 0) for _, t in prs)
            log_drafted = sum(t.get("drafted", 0) for _, t in prs)
            same = sum(r["verify"] == t["gen_n"] - 1 - t.get("accepted", 0) for r, t in prs)
            log_passes = sum(t["gen_n"] - 1 - t.get("accepted", 0) for _, t in prs)
            meas = [r for r in ok if r["phase"] == "measure"]
            c_acc, c_drafts = cn.get("spec_decode_num_accepted_tokens_total"), cn.get("spec_decode_num_drafts_total")
            c_dtok = cn.get("spec_decode_num_draft_tokens_total")
            acc_rows.append(label + [
                f"{sum(r['n'] for r in meas) / max(1, sum(r['verify'] or 0 for r in meas)):.3f}",
                f"{out_ours / verify:.3f}" if verify else "-",
                f"{same} / {len(prs)}",
                f"{sum(t['gen_n'] for _, t in prs) / max(1, log_passes):.3f}",
                f"{log_acc / log_drafted:.4f}" if log_drafted else "-",
                f"{c_acc / c_dtok:.4f}" if c_dtok else "-",
                f"{c_acc / c_drafts + 1:.3f}" if c_drafts else "-"])
        if prs:
            our_rate = [(r["n"] - 1) / r["gen_ms"] * 1e3 for r, _ in prs]
            their_rate = [(t["gen_n"] - 1) / t["gen_ms"] * 1e3 for _, t in prs]
            their_all = [t["gen_n"] / t["gen_ms"] * 1e3 for _, t in prs]
            diff = [100 * (a / b - 1) for a, b in zip(our_rate, their_rate)]
            gap = [r["ttft_ms"] - t["prompt_ms"] for r, t in prs]
            # the gap split on the server's clock: sent -> its slot took the task (HTTP, tokenising, waiting for a
            # slot or the current pass), and prompt done -> the first token at the client (sampling, sending)
            wait = [1e3 * (t["launch_s"] + off - r["t_sent_s"]) for r, t in prs if "launch_s" in t]
            after = [g - w for g, w in zip(gap, wait)]
            rate_rows.append(label + [
                len(prs), f"{statistics.median(our_rate):.1f}", f"{statistics.median(their_rate):.1f}",
                f"{statistics.median(diff):+.2f}% ({min(diff):+.2f}..{max(diff):+.2f})",
                f"{statistics.median(100 * (a / b - 1) for a, b in zip(our_rate, their_all)):+.2f}%",
                f"{statistics.median(r['ttft_ms'] for r, _ in prs):.1f}",
                f"{statistics.median(t['prompt_ms'] for _, t in prs):.1f}",
                f"{statistics.median(gap):+.1f} ({min(gap):+.1f}..{max(gap):+.1f})",
                f"{statistics.median(wait):.1f}" if wait else "-", f"{statistics.median(after):.1f}" if wait else "-"])
        if in_win and cn.get("n_decode_total"):
            before = [t for t in theirs if t["end_s"] + off < cn["t0"] / 1e9]
            g0 = before[-1]["graphs_reused"] if before else in_win[0]["graphs_reused"]
            reused = in_win[-1]["graphs_reused"] - g0
            tpot = [r["gen_ms"] / (r["n"] - 1) for r in ok if r["phase"] == "measure" and r["n"] > 1]
            graph_rows.append(label + [
                f"{cn['n_decode_total']:.0f}", reused, f"{reused / cn['n_decode_total']:.2f}",
                f"{out_srv / cn['n_decode_total']:.2f}" if out_srv else "-",
                f"{statistics.median(tpot):.2f}" if tpot else "-"])
    head = ["run", "step", "target", "C", "repeat"]
    print("\n## Tokens per step: loadgen's ok requests against the server's counters (first to last /metrics "
          "sample of the step) and its log\n")
    _table(head + ["ok / cut", "log entries", "output tokens loadgen / counter", "output tokens in log",
                   "prompt tokens loadgen / counter", "prompt tokens in log", "loadgen + the cut requests' prompts",
                   "cached (counter)", "output"],
           tok_rows)
    print("\n## Acceptance per step (drafted): loadgen's against the server's log and counters\n")
    _table(head + ["loadgen accept length (measure)", "loadgen (all ok)", "requests: verify = log's exactly",
                   "log: tokens / passes", "log: accepted / drafted", "counters: accepted / draft tokens",
                   "counters: accepted / drafts + 1"], acc_rows)
    print("\n## Decode rate and TTFT per request against the server's own timings (paired by the clock)\n")
    _table(head + ["paired", "decode tok/s loadgen p50", "server (gen_n - 1) / eval time p50",
                   "per request diff p50 (range)", "vs server gen_n / eval time", "TTFT p50 ms",
                   "server prompt time p50 ms", "TTFT - prompt time, median (range) ms",
                   "of which sent -> slot took it, p50 ms", "prompt done -> first token at client, p50 ms"],
           rate_rows)
    print("\n## The server's graph reuse per step (llama.cpp's `graphs reused` count in its log against "
          "`n_decode_total`)\n")
    _table(head + ["decode passes", "graphs reused", "reused / pass", "tokens / pass", "TPOT p50 ms"], graph_rows)
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
                   FROM g WHERE step_id IS NOT NULL WINDOW w AS (
                       PARTITION BY run_id, step_id, target, gpu ORDER BY t_ns))
        SELECT run_id, step_id, target, count(*) AS samples, sum(energy_j - e0) AS counter_j,
               sum((power_w + p0) / 2 * (t_ns - t0) / 1e9) AS integrated_j,
               sum(t_ns - t0) / 1e9 AS seconds
        FROM s WHERE t0 IS NOT NULL GROUP BY ALL ORDER BY run_id, step_id, target""").fetchall()
    print("\n## Energy per step: NVML's counter against power integrated over the same samples\n")
    print("| run | step | target | samples | seconds | counter J | integrated J | difference |")
    print("|---|---|---|---|---|---|---|---|")
    for run_id, step, target, n, counter, integrated, seconds in rows:
        print(f"| {run_id[:-23]} | {step} | {target} | {n} | {seconds:.1f} | {counter:.0f} | {integrated:.0f} | "
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
    p.add_argument("out", help="the campaign's OUT folder (results/ or results.tar.gz, the servers' logs)")
    p.add_argument("--results", help="the results folder (default OUT/results)")
    p.add_argument("--logs", help="the folder of the servers' logs, NAME.log (default OUT/run, else OUT)")
    p.set_defaults(func=tables)
    args = ap.parse_args()
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
