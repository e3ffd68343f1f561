"""Hidden profiles for the twin's ground truth: an emulator whose every hardware and acceptance number is moved by up
to +-30% at random (a seed the test logs), the truth as a twin file of those very numbers (the emulator's model in
virtual time: what the hidden server does without HTTP), and a measured grid of a few levels against it.

Used by tests/e2e/test_twin.py and tests/benchmarks/bench_twin.py.
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import tomli_w

from loadgen.config import parse_experiment
from loadgen.driver.runner import run_experiment
from loadgen.emulator import profiles
from loadgen.emulator.calibration import draft_path
from loadgen.prompts.length import LengthFit, LengthModel
from loadgen.twin.model import ServerSide, Twin

SPREAD = 0.30
HARDWARE = ("bandwidth_efficiency", "compute_tflops", "prefill_tflops", "step_overhead_ms")
ALGORITHM = ("draft_forward_ms", "accept_decay", "accept_sigma")
FLAGS = {
    "mtp": ["--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
            "--speculative-num-draft-tokens", "4"],
    "dflash2": ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", draft_path("dflash2"),
                "--speculative-num-draft-tokens", "8"],
}
SERVER = {"mtp": ("NEXTN", "chain", 3, 1, 4), "dflash2": ("DFLASH", "block", 1, 1, 8)}


@dataclasses.dataclass(frozen=True)
class Hidden:
    seed: int
    algorithm: str
    flags: list[str]         # the emulator's flags (profiles as files)
    truth: Path              # the same numbers as a twin file
    moves: dict[str, float]  # parameter -> factor it was moved by

    def describe(self) -> str:
        moved = ", ".join(f"{k} x{v:.2f}" for k, v in self.moves.items())
        return f"hidden profile seed {self.seed} ({self.algorithm}): {moved}"


def hidden_profile(seed: int, folder: Path, algorithm: str | None = None, time_scale: float = 4.0,
                   spread: float = SPREAD) -> Hidden:
    """gb10 + the algorithm's shipped profile with every number moved by a factor in [1 - spread, 1 + spread]
    (acceptance decay kept <= 1: a decay above 1 would raise acceptance along the draft), written as emulator
    profile files. spread = 0: the shipped profiles themselves (the emulator's defaults, as a twin file)."""
    rng = random.Random(seed)
    algorithm = algorithm or rng.choice(("mtp", "dflash2"))
    hw = profiles.load("hardware", "gb10")
    alg = profiles.load("algorithms", algorithm)
    moves: dict[str, float] = {}

    def move(name: str, value: float) -> float:
        moves[name] = rng.uniform(1 - spread, 1 + spread)
        return value * moves[name]

    hw = dataclasses.replace(hw, name="hidden", description=f"hidden seed {seed}",
                             **{k: round(move(k, getattr(hw, k)), 4) for k in HARDWARE})
    changed = {k: round(move(k, getattr(alg, k)), 4) for k in ALGORITHM}
    changed["accept_decay"] = min(1.0, changed["accept_decay"])
    accept = {kind: round(min(0.95, move(f"accept_p.{kind}", p)), 4) for kind, p in (alg.accept_p or {}).items()}
    alg = dataclasses.replace(alg, name="hidden", accept_p=accept, **changed)
    folder.mkdir(parents=True, exist_ok=True)
    hw_file, alg_file = folder / "hidden-hardware.toml", folder / "hidden-algorithm.toml"
    hw_file.write_text(tomli_w.dumps(dataclasses.asdict(hw)))
    alg_file.write_text(tomli_w.dumps({k: v for k, v in dataclasses.asdict(alg).items() if v is not None}))
    flags = ["--model-path", "hidden", "--hardware", str(hw_file), "--algorithm-profile", str(alg_file),
             "--time-scale", f"{time_scale:g}", "--seed", str(seed), *FLAGS[algorithm]]
    model = profiles.load("models", "qwen3.8-27b-nvfp4")
    name, draft, steps, topk, tokens = SERVER[algorithm]
    truth = Twin({"run": f"hidden-{seed}", "target": "truth", "server": "emulator", "emulated": True,
                  "fit_levels": []}, time_scale,
                 ServerSide(name, draft, steps, topk, tokens, 64, int(model.kv_pool_tokens * alg.kv_pool_fraction)),
                 hw, model, alg, LengthModel((("*", LengthFit(0.0, 0.25)),), counted=True), 128)
    truth_file = folder / "truth.toml"
    truth.save(truth_file)
    return Hidden(seed, algorithm, flags, truth_file, moves)


def measure(url: str, levels: list[int], results: Path, prompts: dict, requests: int = 24) -> str:
    """A measured grid over `levels` against the emulator at `url` (target "hidden"); its run id."""
    return measure_targets({"hidden": url}, levels, results, prompts, requests)


def measure_targets(urls: dict[str, str], levels: list[int], results: Path, prompts: dict,
                    requests: int = 24) -> str:
    """A measured grid over `levels` against the emulators at `urls` (name -> url, measured together); its run id.
    Windows of a few request lifetimes: a 2 s window at C = 16 (1.5 lifetimes, 24 requests) measured the warm-up's
    transient (every slot decoding, no prefill between), and one draw of it: its TTFT p50 moves 14% between seeds of
    the same server, and a twin fitted to it missed the steady state by 10-25% (test_twin's seed, 681 tok/s measured
    against 547 steady)."""
    exp = parse_experiment({
        "run": {"name": "twin-source"},
        "load": {"concurrency": levels, "warmup_s": 2.0, "measure_s": 6.0, "min_measured_requests": requests,
                 "drain_timeout_s": 120.0},
        "prompts": prompts,
        "targets": [{"name": name, "url": url} for name, url in urls.items()]}, Path("."))
    outcome = run_experiment(exp, str(results), log=lambda *a: None)
    assert outcome.status == "complete", outcome.reason
    return outcome.run_id
