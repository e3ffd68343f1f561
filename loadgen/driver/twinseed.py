"""A twin-seeded capacity search (search_start = "twin", docs/twin.md): before any load, each target's twin predicts
its capacity at the run's SLO (loadgen/twin/seed.py), and the search starts there (loadgen/plan/search.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from loadgen.config import Experiment


def seeded(exp: Experiment, results: Path, log: Callable[[str], None]) -> Experiment:
    """`exp` with every target's predicted start in its search config; `exp` itself when the search is not seeded."""
    search = exp.load.search
    if search is None or not search.seeded:
        return exp
    # imported here: only a twin-seeded search needs the twin's fit (scipy), not every job's start
    from loadgen.twin.seed import predicted_start, twin_refs
    refs = twin_refs(exp, results, log)
    starts = []
    for target in exp.targets:
        start = predicted_start(exp, target, refs[target.name], results, log)
        log(f"target {target.name}: {start.note}: the search probes {start.level:g} first")
        starts.append(start)
    return dataclasses.replace(exp, load=dataclasses.replace(exp.load, search=dataclasses.replace(
        search, seeds=tuple(starts))))
