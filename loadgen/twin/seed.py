"""Where a twin-seeded search starts (search_start = "twin", docs/twin.md): each target's capacity at the run's SLO,
searched on its twin in virtual time, with an interval from the fit's residuals.

The prediction is the same capacity search on the twin (predict.py) and the same SQL verdicts (views.sql level_slo,
queries/capacity.sql); it is kept in the results folder as a predicted run of its own, so `twin_error` later puts
it beside what the confirming search measured. The interval: the twin's leave-one-level-out error says how far its
TTFT and TPOT may be from the server's; the capacity at SLO lines moved by that much each way (the twin too
optimistic: lines divided by 1 + error; too pessimistic: multiplied) bounds where the measured capacity should be.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Callable
from pathlib import Path

from loadgen.config import Experiment, TargetConfig
from loadgen.config.search import TwinStart
from loadgen.config.targets import TwinRef
from loadgen.results import analysis
from loadgen.results.slo import Slo
from loadgen.twin.fit import fit_twin
from loadgen.twin.model import Twin
from loadgen.twin.observe import read_source
from loadgen.twin.predict import run_predicted
from loadgen.twin.whatif import load_target

MIN_SPREAD = 0.03     # an interval at least +-3% wide: a fit is never better than the noise of its levels


def twin_refs(exp: Experiment, results: Path, log: Callable[[str], None]) -> dict[str, TwinRef]:
    """Every target's twin: the files search_twin names, or each target fitted from its namesake in the run it
    names (written next to the results: twins/run_id=<run>/<target>.toml)."""
    search = exp.load.search
    assert search is not None and search.seeded
    if not isinstance(search.twin, str):
        return dict(search.twin)
    refs = {}
    for t in exp.targets:
        path = results / "twins" / f"run_id={search.twin}" / f"{t.name}.toml"
        twin = fit_twin(read_source(results, search.twin, t.name))
        path.parent.mkdir(parents=True, exist_ok=True)
        twin.save(path)
        log(f"target {t.name}: twin fitted from run {search.twin} -> {path}"
            + (f"; {twin.error.describe()}" if twin.error else ""))
        refs[t.name] = TwinRef(str(path))
    return refs


def predicted_start(exp: Experiment, target: TargetConfig, ref: TwinRef, results: Path,
                    log: Callable[[str], None]) -> TwinStart:
    """The twin's capacity for `target` at the experiment's SLO, searched over its range, with the interval."""
    twin = load_target(ref, f"load.search_twin.{target.name}")
    level = _capacity(exp, target, ref, exp.slo, results, "twin-seed", log)
    spread = twin_spread(twin)
    with tempfile.TemporaryDirectory(prefix="loadgen-twin-seed-") as tmp:
        low = _capacity(exp, target, ref, exp.slo and scaled_slo(exp.slo, spread, 1), Path(tmp), "twin-seed-low",
                        log)
        high = _capacity(exp, target, ref, exp.slo and scaled_slo(exp.slo, spread, -1), Path(tmp),
                         "twin-seed-high", log)
    note = (f"the twin's capacity {level:g} ({min(low, level):g}-{max(high, level):g} for its error of "
            f"TTFT {100 * spread[0]:.0f}%, TPOT {100 * spread[1]:.0f}%)")
    return TwinStart(target.name, level, min(low, level), max(high, level), note)


def twin_spread(twin: Twin) -> tuple[float, float]:
    """(TTFT, TPOT) relative error of the twin: the RMS of its leave-one-level-out errors, at least MIN_SPREAD."""
    spread = twin.error.spread if twin.error else {}
    ttft = max(spread.get("ttft_p90_ms", 0.0), spread.get("ttft_p50_ms", 0.0), MIN_SPREAD)
    return ttft, max(spread.get("tpot_p50_ms", 0.0), MIN_SPREAD)


def scaled_slo(slo: Slo, spread: tuple[float, float], side: int) -> Slo:
    """The SLO's lines as the twin must meet them if it is off by `spread` (side 1: the server is slower than the
    twin says, so the twin must meet tighter lines; -1: faster, looser)."""
    ttft, tpot = (1 + spread[0]) ** side, (1 + spread[1]) ** side
    return dataclasses.replace(slo, ttft_ms=None if slo.ttft_ms is None else slo.ttft_ms / ttft,
                               tpot_ms=None if slo.tpot_ms is None else slo.tpot_ms / tpot,
                               e2e_s=None if slo.e2e_s is None else slo.e2e_s / max(ttft, tpot))


def _capacity(exp: Experiment, target: TargetConfig, ref: TwinRef, slo: Slo | None, results: Path, name: str,
              log: Callable[[str], None]) -> float:
    """The capacity the twin's own search finds (the range's top when no level fails, its bottom when all do)."""
    search = exp.load.search
    assert search is not None
    plain = dataclasses.replace(search, twin=None, seeds=())   # the usual search, from the range's middle
    twin_target = dataclasses.replace(target, url=None, emulator_args=(), twin=ref)
    predicted_exp = dataclasses.replace(exp, name=f"{exp.name}-{name}", targets=(twin_target,), slo=slo,
                                        load=dataclasses.replace(exp.load, search=plain), fleet=None)
    run_id = run_predicted(predicted_exp, results, log=lambda _: None)
    [row] = analysis.run_query(analysis.open_results(results, [run_id]), "capacity").to_pylist()
    if name == "twin-seed":
        log(f"target {target.name}: twin-seed run {run_id} predicts capacity {row['capacity']} "
            f"(first fail {row['first_fail']}) in {row['steps']} predicted steps")
    if row["capacity"] is None:
        return search.low
    return float(row["capacity"])
