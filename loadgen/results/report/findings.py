"""The verdict in words: per comparison who is faster at which load, where the lead changes and what is not
known; capacity at the SLO; fleet nodes off their peers; server settings that differ; warnings a reader must
see before trusting the numbers. Both the HTML page and the Markdown summary print these findings.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from loadgen.results.drift import drift_lines
from loadgen.results.gpu_answer import cost_lines
from loadgen.results.report.data import SMALL_SAMPLE, Report, Rows, level_text, pct


@dataclass
class Finding:
    """One point of the verdict: kind is answer | capacity | conditions | like | warning; lead: its headline."""

    kind: str
    text: str
    lead: str = ""

    def plain(self) -> str:
        return f"{self.lead} {self.text}".strip()


def verdict(report: Report) -> list[Finding]:
    """The answer in words: per comparison who is faster where, the crossover and what is not known;
    capacity at the SLO; server settings that differ; warnings a reader must see before trusting it."""
    return (_comparison_findings(report) + _capacity_findings(report) + _cost_findings(report)
            + _fleet_findings(report) + _drift_findings(report) + _confounder_findings(report) + _warnings(report))


def _cost_findings(report: Report) -> list[Finding]:
    """What a million output tokens cost at the run's prices, as the job's answer says it."""
    return [Finding("answer", line) for line in cost_lines(report.data["cost"])]


def comparison_pairs(report: Report) -> dict[tuple, Rows]:
    """compare_algorithms rows per (run, baseline series, other series), in level order."""
    pairs: dict[tuple, Rows] = defaultdict(list)
    for row in report.data["compare_algorithms"]:
        pairs[(row["run_id"], row["baseline_target"], row["baseline_algorithm"], row["target"],
               row["algorithm"])].append(row)
    return pairs


def _comparison_findings(report: Report) -> list[Finding]:
    findings = []
    crossings = defaultdict(list)
    for c in report.data["crossover"]:
        crossings[(c["run_id"], c["baseline_target"], c["baseline_algorithm"], c["target"], c["algorithm"])].append(c)
    for pair, rows in comparison_pairs(report).items():
        other, base = report.label(rows[0]), f"{rows[0]['baseline_target']} ({rows[0]['baseline_algorithm']})"
        known = [r for r in rows if r["tok_s_change_pct"] is not None]
        if not known:
            continue
        stretches = _sign_stretches([r for r in known if r["tok_s_change_pct"] != 0])
        lead = f"{other} vs {base}: {_order_text(stretches, known)}."
        text = f"Aggregate tok/s {rows[0]['target']} vs {rows[0]['baseline_target']}: " + "; ".join(
            f"{pct(r['tok_s_change_pct'])} at {level_text(r)}" for r in known) + "."
        flips = [f"{level_text(_previous(c))} and {level_text(c)}" for c in crossings[pair]]
        if flips:
            text += " The faster series changes between " + ", between ".join(flips) + "."
        repeats = min(min(r["repeats"], r["baseline_repeats"]) for r in rows)
        if len(flips) > 1 and repeats < 2:
            text += " A lead that changes back and forth is more likely noise than a trend."
        closest = min(known, key=lambda r: abs(r["tok_s_change_pct"]))
        if repeats < 2:
            text += (" Each level ran once, so the noise is unknown: whether a difference as small as "
                     f"{pct(closest['tok_s_change_pct'])} ({level_text(closest)}) is real cannot be told "
                     "(set load.repeats to 3 or more).")
        else:
            inside = [level_text(r) for r in known if r["signal"] is False]
            text += (f" With {repeats} repeats, the difference is outside the spread at every level." if not inside
                     else f" With {repeats} repeats, the difference is inside the spread (not a signal) at "
                          f"{', '.join(inside)}.")
        findings.append(Finding("answer", text, lead))
    return findings


def _previous(crossing: dict) -> dict:
    """The last level before a crossover, as a row level_text can name."""
    return {"concurrency": crossing["previous_concurrency"], "rate": crossing["previous_rate"]}


def _sign_stretches(rows: Rows) -> list[Rows]:
    """Consecutive levels where the other series is on the same side of the baseline."""
    stretches: list[Rows] = []
    for row in rows:
        if stretches and (row["tok_s_change_pct"] > 0) == (stretches[-1][-1]["tok_s_change_pct"] > 0):
            stretches[-1].append(row)
        else:
            stretches.append([row])
    return stretches


def _order_text(stretches: list[Rows], known: Rows) -> str:
    """'faster at every level both were measured at (C=1 to C=32)' | 'faster up to C=8, slower from C=16' |
    'no consistent order: ...'; one shared level is named as the only one."""
    def word(rows: Rows) -> str:
        return "faster" if rows[0]["tok_s_change_pct"] > 0 else "slower"

    if not stretches or (len(stretches) == 1 and len(stretches[0]) == len(known)):
        return (word(stretches[0]) if stretches else "equal") + _where(known)
    if len(stretches) == 1:
        ties = ", ".join(level_text(r) for r in known if r["tok_s_change_pct"] == 0)
        return f"{word(stretches[0])} at {', '.join(level_text(r) for r in stretches[0])}, equal at {ties}"
    if len(stretches) == 2:
        first, last = stretches
        return f"{word(first)} up to {level_text(first[-1])}, {word(last)} from {level_text(last[0])}"
    sides = {w: ", ".join(level_text(r) for s in stretches if word(s) == w for r in s) for w in ("faster", "slower")}
    return f"no consistent order (faster at {sides['faster']}; slower at {sides['slower']})"


def _where(known: Rows) -> str:
    """Which levels a one-sided verdict covers: ' at C=4, the only level both were measured at' (a search runs each
    target at its own levels, so two may share one) or ' at every level both were measured at (C=1 to C=32)'."""
    if len(known) == 1:
        return f" at {level_text(known[0])}, the only level both were measured at"
    return f" at every level both were measured at ({level_text(known[0])} to {level_text(known[-1])})"


def slo_text(slo: dict[str, float]) -> str:
    lines = [f"TTFT \u2264 {slo['ttft_ms']:g} ms" if "ttft_ms" in slo else "",
             f"TPOT \u2264 {slo['tpot_ms']:g} ms" if "tpot_ms" in slo else "",
             f"e2e \u2264 {slo['e2e_s']:g} s" if "e2e_s" in slo else ""]
    text = ", ".join(line for line in lines if line)
    if "attainment" in slo:
        text += f" for {100 * slo['attainment']:g}% of requests"
    if "max_error_rate" in slo:
        text += f", errors \u2264 {100 * slo['max_error_rate']:g}%"
    return text


def _load_level(v: float, open_loop: bool) -> str:
    """A load level in a capacity finding: a rate in req/s (open loop) or C=<concurrency> (closed loop)."""
    return f"{v:g} req/s" if open_loop else f"C={v:g}"


def _capacity_findings(report: Report) -> list[Finding]:
    if not report.slo:
        return [Finding("capacity", "No SLO set, so no capacity is judged (add an [slo] table to the experiment "
                                    "file: TTFT, TPOT, e2e thresholds and the share of requests that must meet them).")]
    findings = []
    for c in report.data["capacity"]:
        fmt = partial(_load_level, open_loop=c.get("mode") in ("open", "trace"))   # a trace: its mean rate
        if c["capacity"] is None:
            text = f"{report.label(c)}: no load level met the SLO"
            text += f" (failed from {fmt(c['first_fail'])})" if c.get("first_fail") is not None else ""
        else:
            text = f"{report.label(c)}: capacity {fmt(c['capacity'])} at the SLO"
            text += _interval_text(c, fmt)
            if c.get("tok_s") is not None:
                text += f", {c['tok_s']:.0f} tok/s aggregate"
            if c.get("user_tok_s") is not None:
                text += f", {c['user_tok_s']:.1f} tok/s per user"
        if c.get("note"):
            text += f"; {c['note']}"
        findings.append(Finding("capacity", text + "."))
    head = f"SLO: {slo_text(report.slo)}."
    return [Finding("capacity", head)] + (findings or [Finding("capacity", "No capacity rows for this SLO.")])


def _interval_text(c: dict, fmt: Callable[[float], str]) -> str:
    """What the capacity's interval rests on: ' (C=4 passed clearly and C=6, the next level probed above it,
    failed clearly)' when it is one level wide; ' (between C=3 and C=6 given the noise)' when the calls near it
    were unclear."""
    low, high = c.get("capacity_low"), c.get("capacity_high")
    if low is None or high is None:
        return ""
    if low == high == c["capacity"] and c.get("first_fail") is not None:
        return (f" ({fmt(low)} passed clearly and {fmt(c['first_fail'])}, the next level probed above it, "
                "failed clearly)")
    return f" (between {fmt(low)} and {fmt(high)} given the noise)"


def _fleet_findings(report: Report) -> list[Finding]:
    """Fleet runs: the nodes fleet_nodes flags as off their peers' median, or that none is."""
    rows = report.data["fleet_nodes"]
    if not rows:
        return []
    off: dict[tuple[str, str], Rows] = defaultdict(list)
    for r in rows:
        if r["outlier"]:
            off[(r["node"], r["configuration"])].append(r)
    if not off:
        return [Finding("like", "every node is within the outlier threshold of its peers' median (fleet_nodes).",
                        "Fleet:")]
    findings = []
    for (node, config), nrows in off.items():
        changes = ", ".join(f"{pct(r['tok_s_vs_fleet_pct'])} at {level_text(r)}" for r in nrows)
        findings.append(Finding("warning", f"aggregate tok/s {changes} against the median of its peers "
                                "(flagged by fleet_nodes).", f"Node {node} is off the fleet in {config}:"))
    return findings


def _drift_findings(report: Report) -> list[Finding]:
    """Targets that watch their twin (twin_drift): each node off its own twin beyond the band, or that none is."""
    rows = report.data["twin_drift"]
    if not rows:
        return []
    found = [Finding("warning", line + " (twin_drift; refit it with `loadgen twin refit`).", "Drift:")
             for line in drift_lines(rows)]
    return found or [Finding("like", "every node that watches its twin is within the twin's band (twin_drift).",
                             "Twins:")]


def _confounder_findings(report: Report) -> list[Finding]:
    diffs: dict[tuple, Rows] = defaultdict(list)
    for row in report.data["confounders"]:
        if row.get("note"):   # a GPU that ran slow, throttled or on other hardware: _hardware_findings says it
            continue
        diffs[(row["run_id"], f"{row['baseline_target']} ({row['baseline_algorithm']})",
               f"{row['target']} ({row['algorithm']})")].append(row)
    findings = _hardware_findings(report)
    for (_run, base, other), rows in diffs.items():
        items = []
        for r in rows:
            change = f" ({pct(r['change_pct'])})" if r["change_pct"] is not None else ""
            name = SETTING_NAMES.get(r["setting"], r["setting"])
            items.append(f"{name}: {_short(r['value'])} vs {_short(r['baseline_value'])}{change}")
        findings.append(Finding("conditions", "; ".join(items) + ". Part of the difference may come from "
                                "these settings, not from speculative decoding.",
                                f"Unequal conditions, {other} vs {base}:"))
    unrecorded = sorted({t for run, base, _, other, _ in comparison_pairs(report) for t in (base, other)
                         if (run, t) not in report.with_server_info})
    if unrecorded:
        findings.append(Finding("conditions", f"{', '.join(unrecorded)} recorded no server settings "
                                "(not SGLang's /get_server_info), so unequal conditions cannot be ruled out.",
                                "Server settings unknown:"))
    elif comparison_pairs(report) and not diffs:
        findings.append(Finding("like", "no recorded server setting (KV pool, memory fraction, flags, "
                                "version, model) differs between the compared series besides the speculative "
                                "ones.", "Like for like:"))
    return findings


def _hardware_findings(report: Report) -> list[Finding]:
    """The GPU telemetry's confounders (confounders.sql rows with a note): a node that ran slow, was throttled or
    runs other hardware than its peers."""
    notes = dict.fromkeys(r["note"] for r in report.data["confounders"] if r.get("note"))
    return [Finding("conditions", note, "Hardware:") for note in notes]


SETTING_NAMES = {"max_total_num_tokens": "KV pool (max_total_num_tokens, tokens)",
                 "mem_fraction_static": "memory fraction (mem_fraction_static)", "version": "server version",
                 "model_path": "model (model_path)"}


def _span(values: list) -> str:
    return f"{values[0]}" if len(values) == 1 else f"{values[0]} to {values[-1]}"


def _short(value: str, limit: int = 40) -> str:
    return value if len(value) <= limit else value[:limit - 1] + "\u2026"


def _modelled(emulators: list[tuple[str, float]]) -> str:
    """`hardware profile gb10`, or `hardware profile gb10, at 2x its modelled speed: --time-scale 2`."""
    return "; ".join(f"hardware profile {hw}" + (f", at {scale:g}x its modelled speed: --time-scale {scale:g}"
                                                 if scale != 1 else "") for hw, scale in emulators)


def _warnings(report: Report) -> list[Finding]:
    data, found = report.data, []
    if report.emulated:
        modelled = f" ({_modelled(report.emulators)})" if report.emulators else ""
        found.append(f"Emulated: these numbers come from loadgen's SGLang emulator{modelled}, a cost model, not a "
                     "GPU.")
    if report.predicted:
        found.append("Predicted: these numbers are a twin's prediction in virtual time, not a measurement "
                     "(docs/twin.md); `loadgen query twin_error` puts them beside measured steps where both exist.")
    for r in data["client_health"]:
        if r["distorted"]:
            found.append(f"Client health flagged {report.run_labels[r['run_id']]} step {r['step_id']} "
                         f"({level_text(r)}): {r['verdict']}; its numbers may be the client's, not the server's.")
    unknown = [r for r in data["client_health"] if r["distorted"] is None]
    if unknown:
        found.append(f"Client health unknown for {len(unknown)} step(s) (no client samples in the window).")
    small = [r for r in data["latency_by_concurrency"] if r["metric"] == "ttft_ms" and r["n"] < SMALL_SAMPLE]
    if small:
        steps = len([r for r in data["latency_by_concurrency"] if r["metric"] == "ttft_ms"])
        found.append(f"Small samples: {len(small)} of {steps} steps measured fewer than {SMALL_SAMPLE} requests "
                     f"(n = {_span(sorted({r['n'] for r in small}))}): their latency "
                     "percentiles rest on few requests (n is written beside them in the plots; p99 is then "
                     "about the maximum).")
    for s in report.incomplete_steps:
        found.append(f"Step {s['step_id']} of {report.run_labels[s['run_id']]} ({s['target']}, {level_text(s)}) "
                     f"is {s['step_status']}: its numbers may be partial.")
    for r in data["runs"]:
        if r["status"] != "complete":
            found.append(f"Run {report.run_labels[r['run_id']]} is {r['status']}.")
    failed = [r for r in data["errors_by_class"] if r["status"] != "ok" and r["measured"]]
    if failed:
        by_class: dict[str, int] = defaultdict(int)
        for r in failed:
            by_class[r["status"]] += r["measured"]
        found.append("Measured requests failed: " + ", ".join(f"{n} {c}" for c, n in by_class.items()) + ".")
    return [Finding("warning", w) for w in found]

