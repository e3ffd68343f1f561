"""Soak: does a long run hold? One closed-loop step at C=256 over 4 workers against the emulator, for --minutes
(default 60), sampled every 10 s: RSS and open descriptors of the driver, each worker and the sink (found among
the driver's descendants by their Ray process titles), then from the results frames/s, requests/s, failures,
resends and the client_health figures (loop lag, socket read delay, worker CPU, in flight) per 10 s.

The samples taken while steps ran count (not Ray's start-up before, nor the driver's summary after). Checks, after
the first 5 minutes of load (a third of the run when it is shorter than 15 minutes):
- RSS growth under 5% for every process (the median of its last 3 samples against the median of 3 samples at
  the settle point);
- no descriptor growth (no process's most in the last third above its most in the first third after settling,
  give or take 4: connections close and reopen);
- no lost or duplicated row: every request the emulator served (its own ledger, taken every 10 s with POST
  /emulator/reset so it stays small) has exactly one `requests` row, no request id has two rows, the emulator
  never served one request twice, and a row the emulator never saw is a request cut before it was sent
  (`cancelled`).

    python tests/benchmarks/soak.py --minutes 3 --out /tmp/soak       # a quick check
    python tests/benchmarks/soak.py --out /tmp/soak                   # the hour: table, soak.png, soak.json

With --search it runs capacity searches back to back in one driver process instead (the driver, the workers and
the sink live through every step of every search; the row checks cover all of them). Not part of the test suite.
Exit status 1 when a check fails.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections import Counter
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from loadgen.clock import now_ns  # noqa: E402
from loadgen.emulator.launch import EmulatorProcess  # noqa: E402
from loadgen.results import analysis  # noqa: E402

SAMPLE_S = 10.0
RSS_GROWTH_MAX = 0.05
FD_SLACK = 4
ROLES = {"ray::LoadWorker": "worker", "ray::ResultsSink": "sink"}
EMULATOR = ["--model-path", "m", "--speculative-algorithm", "NEXTN", "--max-running-requests", "256"]


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=60.0)
    p.add_argument("--concurrency", type=int, default=256)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=128, help="output tokens per request")
    p.add_argument("--time-scale", type=float, default=10.0,
                   help="the emulator runs the modelled GB10 this many times faster")
    p.add_argument("--search", action="store_true", help="capacity searches back to back instead of one step")
    p.add_argument("--out", type=Path, required=True, help="folder for the results, the log, soak.png, soak.json")
    return p.parse_args()


def experiment(args: argparse.Namespace, url: str) -> str:
    seconds = round(args.minutes * 60)
    if args.search:   # short probes, so that each search has several levels and the hour many searches
        load = (f'search = "capacity"\nsearch_min = 16\nsearch_max = {args.concurrency}\nwarmup_s = 3\n'
                'measure_s = 15\n')
    else:
        load = f"concurrency = [{args.concurrency}]\nwarmup_s = 10\nmeasure_s = {seconds}\nmax_measure_s = {seconds}\n"
    return textwrap.dedent(f"""\
        [run]
        name = "soak"
        [load]
        workers_per_target = {args.workers}
        drain_timeout_s = 120
        realtime_priority = false
        """) + load + textwrap.dedent(f"""\
        [prompts]
        seed = 1
        max_new_tokens = {args.max_tokens}
        [[targets]]
        name = "emu"
        url = "{url}"
        """) + ('[slo]\nttft_ms = 2000\n' if args.search else "")


def driver_command(args: argparse.Namespace, config: Path, results: Path) -> list[str]:
    if not args.search:
        return [sys.executable, "-m", "jobs.capacity", "--config", str(config), "--results", str(results)]
    # one process, one search after another until the time is up
    code = textwrap.dedent(f"""\
        import time
        from pathlib import Path
        from loadgen.config import load_experiment
        from loadgen.driver.runner import run_experiment
        end = time.monotonic() + {args.minutes * 60}
        while time.monotonic() < end:
            run_experiment(load_experiment(Path({str(config)!r})), {str(results)!r}, log=print)
        """)
    return [sys.executable, "-c", code]


def processes(driver: psutil.Process) -> dict[str, psutil.Process]:
    """The driver, its load workers and its sinks, named by role and pid (`worker-1234`): a restarted worker, or
    the next search's actors, are other processes."""
    out = {"driver": driver}
    for child in driver.children(recursive=True):
        try:
            title = " ".join(child.cmdline())
        except psutil.Error:
            continue
        for prefix, role in ROLES.items():
            if title.startswith(prefix):
                out[f"{role}-{child.pid}"] = child
    return out


def sample(driver: psutil.Process) -> dict:
    row: dict = {"t_ns": now_ns(), "rss_mib": {}, "fds": {}}
    for name, proc in processes(driver).items():
        try:
            row["rss_mib"][name] = proc.memory_info().rss / 2**20
            row["fds"][name] = proc.num_fds()
        except psutil.Error:
            pass
    return row


def take_served(url: str, served: Counter, statuses: Counter) -> None:
    """The emulator's finished requests since the last take (it forgets them as it answers)."""
    req = urllib.request.Request(f"{url}/emulator/reset", method="POST")
    with urllib.request.urlopen(req, timeout=30) as resp:
        for record in json.load(resp)["requests"]:
            served[record["rid"]] += 1
            statuses[record["status"]] += 1


def run(args: argparse.Namespace) -> tuple[list[dict], Counter, Counter, Path]:
    args.out.mkdir(parents=True, exist_ok=True)
    results = args.out / "results"
    served: Counter = Counter()
    statuses: Counter = Counter()
    samples: list[dict] = []
    with EmulatorProcess([*EMULATOR, "--time-scale", str(args.time_scale)]) as emu:
        config = args.out / "soak.toml"
        config.write_text(experiment(args, emu.url))
        with open(args.out / "driver.log", "wb") as log:
            proc = subprocess.Popen(driver_command(args, config, results), stdout=log, stderr=subprocess.STDOUT,
                                    cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)))
            driver = psutil.Process(proc.pid)
            next_t = time.monotonic()
            while proc.poll() is None:
                samples.append(sample(driver))
                take_served(emu.url, served, statuses)
                next_t += SAMPLE_S
                while proc.poll() is None and time.monotonic() < next_t:
                    time.sleep(0.2)
        take_served(emu.url, served, statuses)
        with urllib.request.urlopen(f"{emu.url}/emulator/requests", timeout=30) as resp:
            left = json.load(resp)["requests"]   # still running at the server: none after a finished run
        for record in left:
            served[record["rid"]] += 1
            statuses[record["status"]] += 1
    if proc.returncode != 0:
        sys.exit(f"the driver exited {proc.returncode}; see {args.out / 'driver.log'}")
    return samples, served, statuses, results


def per_interval(results: Path, t0: int, n: int) -> list[dict]:
    """Frames/s, requests, failures, resends and client_health's figures for each SAMPLE_S after t0."""
    con = analysis.open_results(results)
    width = int(SAMPLE_S * 1e9)
    rows = [{} for _ in range(n)]

    def fill(sql: str) -> None:
        cur = con.execute(sql, [t0, width, n])
        names = [d[0] for d in cur.description]
        for values in cur.fetchall():
            row = dict(zip(names, values))
            rows[row.pop("b")].update(row)

    fill("SELECT ((t_ns - ?) // ?)::INT AS b, count(*) / 10.0 AS frames_s FROM frames "
         "GROUP BY b HAVING b >= 0 AND b < ?")
    fill("SELECT ((coalesce(t_sent_ns, t_scheduled_ns) - ?) // ?)::INT AS b, count_if(status = 'ok') AS ok, "
         "count_if(status NOT IN ('ok', 'cancelled')) AS failed, count_if(resent) AS resent FROM requests "
         "GROUP BY b HAVING b >= 0 AND b < ?")
    fill("SELECT ((t_ns - ?) // ?)::INT AS b, quantile_cont(loop_lag_ms, 0.99) AS lag_p99, "
         "quantile_cont(read_delay_max_ms, 0.99) AS read_p99, quantile_cont(cpu_percent, 0.9) AS cpu_p90, "
         "sum(in_flight) / count(DISTINCT t_ns // 500000000) AS in_flight FROM client_samples "
         "GROUP BY b HAVING b >= 0 AND b < ?")
    return rows


def row_checks(results: Path, served: Counter) -> dict:
    con = analysis.open_results(results)
    counts = dict(con.execute("SELECT request_id, count(*) FROM requests GROUP BY request_id").fetchall())
    status = dict(con.execute("SELECT request_id, any_value(status) FROM requests GROUP BY request_id").fetchall())
    unseen = Counter(status[rid] for rid in counts if rid not in served)
    return {"rows": sum(counts.values()), "served": sum(served.values()),
            "lost": sum(1 for rid in served if rid not in counts),
            "duplicated_rows": sum(n - 1 for n in counts.values() if n > 1),
            "served_twice": sum(n - 1 for n in served.values() if n > 1),
            "rows_never_served": dict(unseen),
            "statuses": dict(Counter(status.values())),
            "resent": con.execute("SELECT count_if(resent) FROM requests").fetchone()[0]}


def growth_checks(samples: list[dict], settle_s: float) -> dict:
    t0 = samples[0]["t_ns"]
    settled = [s for s in samples if (s["t_ns"] - t0) / 1e9 >= settle_s]
    out: dict = {"settle_s": settle_s, "rss": {}, "fds": {}}
    if len(settled) < 6:
        return dict(out, error=f"only {len(settled)} samples after {settle_s:.0f} s: run longer")
    names = sorted({n for s in settled for n in s["rss_mib"]})
    third = max(1, len(settled) // 3)
    for name in names:
        rss = [s["rss_mib"][name] for s in settled if name in s["rss_mib"]]
        fds = [s["fds"][name] for s in settled if name in s["fds"]]
        if len(rss) < 6:
            continue
        start, end = statistics.median(rss[:3]), statistics.median(rss[-3:])
        out["rss"][name] = {"start_mib": round(start, 1), "end_mib": round(end, 1),
                            "growth_pct": round(100 * (end / start - 1), 2), "ok": end / start - 1 < RSS_GROWTH_MAX}
        first, last = max(fds[:third]), max(fds[-third:])
        out["fds"][name] = {"first_third_max": first, "last_third_max": last, "ok": last <= first + FD_SLACK}
    return out


def _cell(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_table(samples: list[dict], intervals: list[dict]) -> None:
    """One line per sample (at most ~40: every k-th), the interval figures of the 10 s after it."""
    t0 = samples[0]["t_ns"]
    workers = sorted({n for s in samples for n in s["rss_mib"] if n.startswith("worker")})
    sinks = sorted({n for s in samples for n in s["rss_mib"] if n.startswith("sink")})
    print(f"{'t min':>6} {'driver':>7} {'workers RSS MiB':>16} {'sink':>6} {'fds d/w/s':>12} {'frames/s':>9} "
          f"{'ok/s':>6} {'fail':>5} {'resent':>6} {'lag99':>6} {'read99':>6} {'cpu90':>6} {'inflt':>6}")
    for i in range(0, len(samples), max(1, math.ceil(len(samples) / 40))):
        s, iv = samples[i], intervals[i] if i < len(intervals) else {}
        w_rss = [s["rss_mib"][w] for w in workers if w in s["rss_mib"]]
        sink_rss = sum(s["rss_mib"].get(n, 0) for n in sinks)
        fds = (f"{s['fds'].get('driver', 0)}/{sum(s['fds'].get(w, 0) for w in workers)}/"
               f"{sum(s['fds'].get(n, 0) for n in sinks)}")
        ok_s = iv["ok"] / SAMPLE_S if iv.get("ok") is not None else None
        print(f"{(s['t_ns'] - t0) / 60e9:6.1f} {s['rss_mib'].get('driver', 0):7.0f} "
              f"{f'{min(w_rss):.0f}-{max(w_rss):.0f}' if w_rss else '-':>16} {sink_rss:6.0f} "
              f"{fds:>12} {_cell(iv.get('frames_s'), '.0f'):>9} {_cell(ok_s, '.1f'):>6} "
              f"{_cell(iv.get('failed'), 'd'):>5} {_cell(iv.get('resent'), 'd'):>6} "
              f"{_cell(iv.get('lag_p99'), '.1f'):>6} {_cell(iv.get('read_p99'), '.1f'):>6} "
              f"{_cell(iv.get('cpu_p90'), '.0f'):>6} {_cell(iv.get('in_flight'), '.0f'):>6}")


def plot(samples: list[dict], intervals: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    t0 = samples[0]["t_ns"]
    minutes = [(s["t_ns"] - t0) / 60e9 for s in samples]
    names = sorted({n for s in samples for n in s["rss_mib"]})
    fig, axes = plt.subplots(2, 2, figsize=(13, 8), sharex=True)
    for name in names:
        axes[0][0].plot(minutes, [s["rss_mib"].get(name, math.nan) for s in samples], label=name)
        axes[0][1].plot(minutes, [s["fds"].get(name, math.nan) for s in samples], label=name)
    axes[0][0].set_title("RSS (MiB)")
    axes[0][1].set_title("open descriptors")
    axes[0][0].legend(fontsize=7)
    x = minutes[:len(intervals)]
    axes[1][0].plot(x, [iv.get("frames_s", math.nan) for iv in intervals], label="frames/s")
    axes[1][0].set_title("frames/s (and cumulative resends, right)")
    twin = axes[1][0].twinx()
    twin.plot(x, [sum(iv.get("resent") or 0 for iv in intervals[:k + 1]) for k in range(len(intervals))], "r:",
              label="resent (cumulative)")
    for key, label in (("lag_p99", "loop lag p99 ms"), ("read_p99", "read delay p99 ms")):
        axes[1][1].plot(x, [iv.get(key, math.nan) for iv in intervals], label=label)
    axes[1][1].set_title("client health")
    axes[1][1].legend(fontsize=7)
    for ax in axes[1]:
        ax.set_xlabel("minutes")
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def under_load(samples: list[dict], results: Path) -> list[dict]:
    """The samples taken while steps ran (from the first step's start to the last one's end): Ray's start-up
    before and the driver's summary after are not the soak."""
    con = analysis.open_results(results)
    start, end = con.execute("SELECT min(t_start_ns), max(t_end_ns) FROM steps").fetchone()
    return [s for s in samples if start <= s["t_ns"] <= end]


def main() -> None:
    args = parse()
    samples, served, statuses, results = run(args)
    samples = under_load(samples, results)
    duration_s = (samples[-1]["t_ns"] - samples[0]["t_ns"]) / 1e9
    intervals = per_interval(results, samples[0]["t_ns"], len(samples))
    print_table(samples, intervals)
    rows = row_checks(results, served)
    growth = growth_checks(samples, min(300.0, duration_s / 3))
    plot(samples, intervals, args.out / "soak.png")
    alive = [sum(n != "driver" for n in s["rss_mib"]) for s in samples]
    summary = {"duration_s": round(duration_s), "rows": rows, "emulator_statuses": dict(statuses),
               "workers_and_sinks_alive": [min(alive), max(alive)], **growth}
    (args.out / "soak.json").write_text(json.dumps(summary, indent=2))
    failures = [f"RSS of {n} grew {g['growth_pct']}%" for n, g in growth["rss"].items() if not g["ok"]]
    failures += [f"descriptors of {n}: {g['first_third_max']} -> {g['last_third_max']}"
                 for n, g in growth["fds"].items() if not g["ok"]]
    failures += [f"{rows[k]} {k.replace('_', ' ')}" for k in ("lost", "duplicated_rows", "served_twice") if rows[k]]
    failures += [f"{n} rows the emulator never saw are {s}" for s, n in rows["rows_never_served"].items()
                 if s != "cancelled"]
    if "error" in growth:
        failures.append(growth["error"])
    if not args.search and max(alive) > args.workers + 1:
        failures.append(f"{max(alive)} worker and sink processes alive at once (expected {args.workers + 1})")
    print(f"\n{rows['rows']} rows, {rows['served']} served by the emulator, {rows['resent']} resent; "
          f"lost {rows['lost']}, duplicated rows {rows['duplicated_rows']}, served twice {rows['served_twice']}; "
          f"statuses {rows['statuses']}")
    print("RSS growth after settling: " + ", ".join(f"{n} {g['growth_pct']:+.2f}%" for n, g in growth["rss"].items()))
    print("descriptors (first third max -> last third max): " + ", ".join(
        f"{n} {g['first_third_max']}->{g['last_third_max']}" for n, g in growth["fds"].items()))
    print(f"plot: {args.out / 'soak.png'}; summary: {args.out / 'soak.json'}")
    if failures:
        print("FAILED: " + "; ".join(failures))
        sys.exit(1)
    print("PASSED")


if __name__ == "__main__":
    main()
