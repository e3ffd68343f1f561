"""The calibration target (the field report) and its workload, shared by the fit check and the HTTP benchmark."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from loadgen.emulator.args import parse_args
from loadgen.emulator.spec import SpecConfig, resolve

HERE = Path(__file__).parent
REPORT_FILE = HERE / "calibration" / "seed-report.toml"
DRAFTS = HERE / "drafts"


def draft_path(name: str) -> str:
    """Path of a shipped example draft folder (dflash1 | dflash2)."""
    return str(DRAFTS / name)


SETUPS: dict[str, list[str]] = {
    "mtp": ["--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
            "--speculative-num-draft-tokens", "4"],
    "dflash2": ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", draft_path("dflash2"),
                "--speculative-num-draft-tokens", "8"],
    "dflash2-b6": ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", draft_path("dflash2"),
                   "--speculative-num-draft-tokens", "6"],
    "dflash2-b4": ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", draft_path("dflash2"),
                   "--speculative-num-draft-tokens", "4"],
    "eagle-b4": ["--speculative-algorithm", "EAGLE", "--speculative-eagle-topk", "1",
                 "--speculative-num-draft-tokens", "4"],
    "eagle-b8": ["--speculative-algorithm", "EAGLE", "--speculative-eagle-topk", "1",
                 "--speculative-num-draft-tokens", "8"],
}


@dataclass(frozen=True)
class Report:
    """The report's figures and the workload the profiles were fitted with."""

    targets: dict
    max_new_tokens: int
    code_prompt: str
    prose_prompt: str

    @property
    def prompts(self) -> list[str]:
        """The calibration mix: code and prose alternating (half each)."""
        return [self.code_prompt, self.prose_prompt]


def load_report() -> Report:
    data = tomllib.loads(REPORT_FILE.read_text())
    w = data["workload"]
    n = w["prompt_chars"]
    code = (w["code"] * (n // len(w["code"]) + 1))[:n] + w["code_task"]
    prose = (w["prose"] * (n // len(w["prose"]) + 1))[:n] + w["prose_task"]
    return Report(data["targets"], w["max_new_tokens"], code, prose)


def spec_for(setup: str) -> SpecConfig:
    """The resolved SpecConfig of one named setup, exactly as the server would resolve its flags."""
    a = parse_args(["--model-path", "calibration", *SETUPS[setup]])
    return resolve(a.speculative_algorithm, a.speculative_num_steps, a.speculative_eagle_topk,
                   a.speculative_num_draft_tokens, a.speculative_draft_model_path)
