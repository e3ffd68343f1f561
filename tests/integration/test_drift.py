"""A twin that watches its node (docs/twin.md): an emulated node (a hidden profile, tests/twinkit.py) measured at
C = 2, 8 and fitted; then one measured run of two nodes of that profile that both watch the twin, the second stuck
in a low-power state (`--fault degraded-power`, a third of its speed). The degraded node is named off its twin in
the answer and fleet_nodes, the healthy one is not; `loadgen twin refit` fits the twin again from the degraded
node's run and shows the drift; a refit that cannot tell which node is meant says so in one line.
"""

from __future__ import annotations

import time

import pytest

from driftkit import drifted, fitted_twin, watched_run
from loadgen.cli import main
from loadgen.results import analysis
from loadgen.twin.fit import power_at
from loadgen.twin.model import load_twin
from loadgen.twin.observe import read_source
from twinkit import hidden_profile

pytestmark = pytest.mark.timeout(600)


def test_a_degraded_node_is_named_off_its_twin_and_the_healthy_one_is_not(ray_local, emulator_factory, tmp_path,
                                                                          capsys):
    hidden = hidden_profile(5, tmp_path / "hidden", "mtp")
    with emulator_factory(*hidden.flags) as healthy, \
            emulator_factory(*hidden.flags, "--fault", "degraded-power") as degraded:
        t0 = time.monotonic()
        twin = fitted_twin(healthy, tmp_path)
        t1 = time.monotonic()
        results = tmp_path / "results"
        run_id, text = watched_run({"spark1": healthy, "spark2": degraded}, twin, results)
        timing = f"fit {t1 - t0:.0f} s, watched run {time.monotonic() - t1:.0f} s"
    with capsys.disabled():   # shown with -s
        print(f"{text}\n{timing}")
    # the twin's power range was fitted to the node's measured GPU power (the emulator's modelled GPU, read as a
    # DCGM exporter): at each fitted level its modelled power is the measured one within 15%
    source = read_source(tmp_path / "source", _only_run(tmp_path / "source"), None)
    fitted = load_twin(twin, "twin")
    assert source.power_w and fitted.fitted["power"].startswith("max_power_w "), fitted.fitted
    for level, watts in power_at(fitted, source).items():
        assert watts == pytest.approx(source.power_w[level], rel=0.15), (level, watts, source.power_w)
    assert "spark2 serves" in text and "below its twin of" in text and "the box or the server changed" in text
    assert "spark1 serves" not in text and "spark1 decodes" not in text
    assert drifted(results, run_id) == {"spark1": False, "spark2": True}
    capsys.readouterr()
    assert main(["twin", "refit", str(twin), "--results", str(results)]) == 2   # two nodes watched it: which one?
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "2 targets of this twin (spark1, spark2)" in err[0] and "--target" in err[0]
    out_file = tmp_path / "refit.toml"
    assert main(["twin", "refit", str(twin), "--results", str(results), "--target", "spark2",
                 "-o", str(out_file)]) == 0
    out = capsys.readouterr().out
    with capsys.disabled():
        print(out)
    assert "drift: spark2 serves" in out and "% below its old twin" in out
    assert out_file.is_file() and f"wrote {out_file}" in out


def _only_run(results) -> str:
    [(run_id,)] = analysis.open_results(results).execute("SELECT run_id FROM runs").fetchall()
    return run_id
