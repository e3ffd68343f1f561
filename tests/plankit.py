"""Ground truth for fleet plans (tests/test_plan*.py, tests/benchmarks/bench_plan.py): configurations whose twins
are hidden profiles' truth files (tests/twinkit.py: the emulator's own model with the hidden numbers, in virtual
time), and the truth's fleet size for a demand: the fewest truth nodes that meet the SLO routed.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path

from loadgen.campaigns.plan import Configuration, fleet_for
from loadgen.campaigns.plan_fleet import Demand, FleetLevel
from loadgen.config.cost import Prices
from loadgen.emulator.launch import EmulatorProcess
from loadgen.prompts.config import parse_prompts_config
from loadgen.results.slo import Slo
from loadgen.twin.fit import fit_twin
from loadgen.twin.model import load_twin
from loadgen.twin.observe import read_source
from loadgen.twin.predict import twin_prompts
from twinkit import hidden_profile, measure_targets

NODES = (("slow-mtp", 3, "mtp"), ("dflash2", 4, "dflash2"), ("fast-mtp", 5, "mtp"))   # one about half as fast
PROMPTS = {"seed": 7, "max_new_tokens": 64, "ignore_eos": True, "input_tokens": {"min": 128, "max": 512}}


def configuration(name: str, twin_file: Path, prices: Prices | None = None) -> Configuration:
    twin = load_twin(twin_file)
    return Configuration(name, twin, twin_prompts(twin, parse_prompts_config(dict(PROMPTS)))[1], prices or Prices(),
                         str(twin_file))


def truth_configuration(name: str, seed: int, algorithm: str, folder: Path,
                        prices: Prices | None = None) -> Configuration:
    """A configuration whose twin is hidden profile `seed`'s truth itself."""
    return configuration(name, hidden_profile(seed, folder / name, algorithm).truth, prices)


def truth_size(config: Configuration, demand: Demand, slo: Slo, router: str, start: int,
               max_nodes: int = 64) -> tuple[int, FleetLevel, FleetLevel | None]:
    """The fewest nodes of `config` whose routed fleet meets `slo` at `demand` (searched from `start`), its level
    and the level with one node fewer (None at one node)."""
    runs: dict[int, FleetLevel] = {}

    def level(k: int) -> FleetLevel:
        if k not in runs:
            runs[k] = fleet_for([(config, k)], demand, slo, router, PROMPTS["max_new_tokens"])
        return runs[k]

    k = max(1, start)
    while k > 1 and level(k - 1).passed:
        k -= 1
    while not level(k).passed:
        if k >= max_nodes:
            raise AssertionError(f"{config.name}: no fleet of up to {max_nodes} nodes meets {slo.describe()}")
        k += 1
    return k, level(k), level(k - 1) if k > 1 else None


def fitted_fleet(nodes: Sequence[tuple[str, int, str]], folder: Path, levels: tuple[int, ...] = (1, 4, 16)
                 ) -> tuple[list[Configuration], dict[str, Configuration]]:
    """Each node type (name, hidden profile seed, algorithm) on its own emulator running its hidden profile, all
    measured together over HTTP in one run at `levels` (as a team measures its fleet) and a twin fitted per target
    (the fit never saw the hidden numbers); the fitted configurations (twin files under `folder`), and each one's
    truth configuration."""
    hidden = {name: hidden_profile(seed, folder / f"{name}-hidden", algorithm) for name, seed, algorithm in nodes}
    for h in hidden.values():
        print(h.describe(), flush=True)
    results = folder / "results"
    with ExitStack() as stack:
        urls = {name: stack.enter_context(EmulatorProcess(h.flags)).url for name, h in hidden.items()}
        run_id = measure_targets(urls, list(levels), results, PROMPTS)
    fitted = []
    for name in hidden:
        twin_file = folder / f"{name}.toml"
        fit_twin(read_source(results, run_id, name)).save(twin_file)
        fitted.append(configuration(name, twin_file))
    truth = {name: truth_configuration(name, seed, algorithm, folder / "truth") for name, seed, algorithm in nodes}
    return fitted, truth
