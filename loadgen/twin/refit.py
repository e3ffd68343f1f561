"""`loadgen twin refit TWIN --results DIR [--run ID] [--target T]`: a twin fitted again from a newer run of its node
(a target that watches it, `watch_twin`, or one of its source's name), starting from the old twin's numbers, with the
drift in words first: how far the node moved from the old twin, level by level, then each fitted number old and new
(docs/twin.md, "A twin that watches its node").
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from loadgen.errors import ConfigError
from loadgen.results import analysis
from loadgen.twin.fit import PARAMS, figures_at, fit_twin
from loadgen.twin.model import Twin, load_twin
from loadgen.twin.observe import Source, read_source

_CANDIDATES = """
SELECT DISTINCT s.run_id, s.target, r.started_at_ns FROM steps s JOIN runs r USING (run_id)
WHERE NOT s.predicted AND (s.target = ? OR (s.run_id, s.target) IN (SELECT run_id, target FROM twin_checks
                                                                     WHERE twin_file = ?))
ORDER BY r.started_at_ns DESC, s.target
"""


def refit_command(args: argparse.Namespace) -> int:
    path = Path(args.twin).resolve()
    old = load_twin(path, "TWIN")
    run_id, target = find_run(args.results, path, old, args.run, args.target)
    source = read_source(args.results, run_id, target)
    check_same(old, source)
    levels = ", ".join(str(lv.concurrency) for lv in source.levels)
    print(f"refitting {path.name} ({old.describe_source()}, fitted {old.fitted_on()}) from run {run_id}: "
          f"{target} at C = {levels}", flush=True)
    new = fit_twin(source, draft_tokens=old.server.draft_tokens, log=lambda line: print(f"  {line}", flush=True),
                   priors=(old.hardware, old.model, old.algorithm))
    print("\n".join(drift_report(old, new, source)))
    out = Path(args.output).resolve() if args.output else path
    if out == path:
        kept = path.with_name(f"{path.stem}.{old.fitted_on().replace(' ', '-')}{path.suffix}")
        kept.write_text(path.read_text())
        new.save(path)
        print(f"wrote {path} (the refit twin; the old one kept as {kept})")
    else:
        new.save(out)
        print(f"wrote {out} (the refit twin; {path} unchanged)")
    return 0


def find_run(results: str, path: Path, old: Twin, run: str | None, target: str | None) -> tuple[str, str]:
    """The run and target to refit from: given, else the newest run (not the twin's own) with a target that watched
    this twin or is named as its source's; one line when there is none or several could be meant."""
    con = analysis.open_results(results, [run] if run else None)
    named = str(old.source.get("target"))
    rows = [(r, t) for r, t, _ in con.execute(_CANDIDATES, [named, str(path)]).fetchall()
            if (run or r != old.source.get("run")) and (target is None or t == target)]
    con.close()
    if run and target:
        return run, target
    if not rows:
        where = f"run {run}" if run else f"{results} (besides the run it was fitted from, {old.source.get('run')})"
        raise ConfigError("--run", f"no target in {where} watched {path.name} (watch_twin) or is named {named!r}"
                          + (f" {target!r}" if target else ""), "name the run and its target: --run ID --target T")
    newest = rows[0][0]
    targets = [t for r, t in rows if r == newest]
    if len(targets) > 1:
        raise ConfigError("--target", f"run {newest} has {len(targets)} targets of this twin ({', '.join(targets)})",
                          "name the node to refit from with --target")
    return newest, targets[0]


def check_same(old: Twin, source: Source) -> None:
    """A refit keeps the model and the draft: a run of another one needs a twin of its own."""
    model = str(old.source.get("model") or "")
    fix = f"fit a new twin: loadgen twin fit --results {source.results} --run {source.run_id} -o FILE"
    if model and source.model and model != source.model:
        raise ConfigError("--run", f"run {source.run_id} served {source.model}, the twin {model}", fix)
    drafts = old.server.algorithm != "NONE"
    if drafts and (source.algorithm != old.server.algorithm
                   or source.draft_tokens not in (None, old.server.draft_tokens)):
        raise ConfigError("--run", f"{source.target} in run {source.run_id} runs {source.algorithm} with "
                          f"{source.draft_tokens} draft tokens, the twin {old.server.algorithm} with "
                          f"{old.server.draft_tokens}", fix)


def drift_report(old: Twin, new: Twin, source: Source) -> list[str]:
    """The drift in words, then per level the tok/s of the old twin, the new and the run, then each number."""
    before, after = figures_at(old, source), figures_at(new, source)
    measured = {lv.concurrency: lv.figures for lv in source.levels}
    moves = {c: 100 * (measured[c]["tok_s"] / before[c]["tok_s"] - 1) for c in before if before[c]["tok_s"] > 0}
    lines = [f"drift: {source.target} serves {_range(list(moves.values()))} its old twin "
             f"(tok/s at C = {', '.join(map(str, moves))}); the refit twin is within "
             f"{max(abs(100 * (after[c]['tok_s'] / measured[c]['tok_s'] - 1)) for c in after):.0f}% of the run",
             "predicted tok/s per level (old twin -> refit twin; the run measured):"]
    for c in before:
        b, a, m = before[c]["tok_s"], after[c]["tok_s"], measured[c]["tok_s"]
        lines.append(f"  C={c:<4d} {b:8.1f} -> {a:8.1f} ({_pct(a, b)}); measured {m:.1f}; TPOT p50 "
                     f"{before[c]['tpot_p50_ms']:.1f} -> {after[c]['tpot_p50_ms']:.1f} ms")
    lines.append("fitted numbers, old -> refit:")
    for p in PARAMS:
        if p.where == "hardware" or new.server.draft != "none":
            b, a = p.value(old), p.value(new)
            lines.append(f"  {p.name:22s} {b:10.4g} -> {a:<10.4g} ({_pct(a, b)})")
    for kind, a in sorted((new.algorithm.accept_p or {}).items()):
        b = (old.algorithm.accept_p or {}).get(kind, math.nan)
        lines.append(f"  accept_p {kind:13s} {b:10.4g} -> {a:<10.4g} ({_pct(a, b)})")
    if new.error is not None:
        lines.append(f"  refit {new.error.describe()}")
    return lines


def _pct(new: float, old: float) -> str:
    return f"{100 * (new / old - 1):+.0f}%" if old > 0 and new == new else "-"


def _range(offs: list[float]) -> str:
    """`64..66% below` (or above, or `-3..+4% off`)."""
    low, high = min(offs), max(offs)
    if high < 0:
        return f"{-high:.0f}..{-low:.0f}% below" if round(high) != round(low) else f"{-low:.0f}% below"
    if low > 0:
        return f"{low:.0f}..{high:.0f}% above" if round(high) != round(low) else f"{low:.0f}% above"
    return f"{low:+.0f}..{high:+.0f}% off"
