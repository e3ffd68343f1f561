"""Will SGLang run this draft as DFlash2, or silently as DFlash1? Checked before a night is spent on it.

Rules read from SGLang 0.5.23 (`sglang/srt/speculative/dflash_utils.py` parse_dflash_draft_config,
`sglang/srt/models/dflash.py`, `sglang/srt/arg_groups/speculative_hook.py` _handle_dflash):
- the draft's `architectures[0]` picks the model class; `DFlash2DraftModel` (and its aliases) is DFlash2,
  `DFlashDraftModel` is DFlash1 whatever keys it carries (the field report's deployment trap);
- DFlash2 is the selector (`selector_rank` + `selector_top_k`) plus the two-tap grouped convolution
  (`conv_kernel_size` + `conv_group_size`), all four in `dflash_config`; each pair must be set together
  (SGLang raises otherwise) and the DFlash2 class refuses a config without `selector_rank`;
- block size: `dflash_config.block_size`, else top-level `block_size`, else 16;
- launch flags: DFLASH forces num-steps and eagle-topk to 1; `--speculative-num-draft-tokens` and its alias
  `--speculative-dflash-block-size` must agree; a budget above the block cannot be drafted; ReplaySSM
  spec-verify needs topk 1, and DFlash2's ReplaySSM path works for KDA models only (Qwen3.8 is GDN).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadgen.values import as_int

DFLASH1_ARCHS = ("DFlashDraftModel", "DFlashLagunaForCausalLM", "MuseGlimmerAssistantModel")
DFLASH2_ARCHS = ("DFlash2DraftModel", "DFlash2BeamDraftModel", "MiniMaxDFlash2DraftModel")
PAIRS = (("conv_kernel_size", "conv_group_size"), ("selector_rank", "selector_top_k"))
DFLASH2_KEYS = tuple(k for pair in PAIRS for k in pair)
DEFAULT_BLOCK_SIZE = 16


@dataclass
class DraftReport:
    """The verdict on one draft (and optionally one launch profile's flags)."""

    path: str
    kind: str                          # dflash2 | dflash1 | broken (the draft alone decides)
    architecture: str | None = None
    block_size: int | None = None
    problems: list[str] = field(default_factory=list)   # refused by SGLang, not what it claims, or a bad flag
    notes: list[str] = field(default_factory=list)      # runs, but worth knowing

    def lines(self) -> list[str]:
        head = {"dflash2": "DFlash2: SGLang runs it as DFlash2 (DFlash2DraftModel, selector and convolution)",
                "dflash1": "DFlash1: SGLang runs it as DFlash1",
                "broken": "broken: SGLang refuses it, or it does not run as what it declares"}[self.kind]
        out = [f"{self.path}: {head}", f"  architecture {self.architecture}, block size {self.block_size}"]
        out += [f"  problem: {p}" for p in self.problems]
        out += [f"  note: {n}" for n in self.notes]
        return out


def _config_file(path: str | Path) -> Path:
    p = Path(path)
    return p / "config.json" if p.is_dir() else p


def check_draft(path: str | Path, flags: dict[str, Any] | None = None) -> DraftReport:
    """Classify the draft at `path` (a folder or its config.json); with `flags` (a launch profile's
    `--flag`s without dashes), also check them against the draft."""
    report = DraftReport(str(path), "broken")
    cfg_file = _config_file(path)
    try:
        cfg = json.loads(cfg_file.read_text())
    except OSError as exc:
        report.problems.append(f"cannot read {cfg_file}: {exc.strerror or exc} (download the draft and point "
                               "--speculative-draft-model-path at its folder)")
        return report
    except json.JSONDecodeError as exc:
        report.problems.append(f"{cfg_file} is not JSON: {exc}")
        return report
    if not isinstance(cfg, dict):
        report.problems.append(f"{cfg_file} is not a JSON object")
        return report
    _classify(cfg, report)
    if flags is not None:
        check_flags(report, flags)
    return report


def _classify(cfg: dict, report: DraftReport) -> None:
    archs = cfg.get("architectures")
    arch = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else None
    report.architecture = arch
    dcfg = cfg.get("dflash_config", {})
    if not isinstance(dcfg, dict):
        report.problems.append("dflash_config must be a JSON object")
        dcfg = {}
    block = dcfg.get("block_size", cfg.get("block_size"))
    if block is None:
        report.block_size = DEFAULT_BLOCK_SIZE
        report.notes.append(f"no block_size: SGLang assumes {DEFAULT_BLOCK_SIZE}")
    elif as_int(block) is None or block < 1:
        report.problems.append(f"block_size must be a whole number >= 1, got {block!r}")
    else:
        report.block_size = block
    values = {k: dcfg.get(k, 0) for k in DFLASH2_KEYS}
    for key, value in values.items():
        if as_int(value) is None or value < 0:
            report.problems.append(f"dflash_config.{key} must be a whole number >= 0, got {value!r}")
            values[key] = 0
    for a, b in PAIRS:
        if bool(values[a]) != bool(values[b]):
            report.problems.append(f"dflash_config.{a} and {b} come in a pair: got {a}={values[a]}, "
                                   f"{b}={values[b]} (SGLang raises ValueError)")
    present = [k for k in DFLASH2_KEYS if values[k]]
    missing = [k for k in DFLASH2_KEYS if not values[k]]
    if arch in DFLASH2_ARCHS:
        if not values["selector_rank"]:
            report.problems.append(f"architecture {arch} needs dflash_config.selector_rank (SGLang: 'DFlash "
                                   "selector draft requires dflash_config.selector_rank')")
        elif missing:
            report.problems.append(f"architecture {arch} without {', '.join(missing)}: SGLang loads it without "
                                   "the two-tap convolution, which is not the DFlash2 the field report measured")
        kind = "dflash2"
    elif arch in DFLASH1_ARCHS:
        if present:
            report.notes.append(f"has DFlash2 keys ({', '.join(present)}) but architecture {arch}: SGLang builds "
                                "the DFlash1 class and ignores the selector; to run DFlash2 set "
                                "architectures = [\"DFlash2DraftModel\"]")
        kind = "dflash1"
    else:
        report.problems.append(f"architectures[0] is {arch!r}, not a DFlash draft (DFlash2: DFlash2DraftModel, "
                               "DFlash1: DFlashDraftModel)")
        kind = "broken"
    report.kind = "broken" if report.problems else kind


def check_flags(report: DraftReport, flags: dict[str, Any]) -> None:
    """Launch-profile flags (keys without the leading dashes) against the draft."""
    algorithm = str(flags.get("speculative-algorithm", "")).upper()
    if algorithm != "DFLASH":
        report.problems.append(f"speculative-algorithm is {algorithm or 'unset'}; a DFlash draft runs only "
                               "with --speculative-algorithm DFLASH")
        return
    for flag in ("speculative-num-steps", "speculative-eagle-topk"):
        if flag in flags and flags[flag] != 1:
            report.problems.append(f"--{flag} {flags[flag]}: DFLASH forces it to 1 (the profile would say "
                                   "something the server does not do); remove it or set 1")
    budget, alias = flags.get("speculative-num-draft-tokens"), flags.get("speculative-dflash-block-size")
    if budget is not None and alias is not None and budget != alias:
        report.problems.append(f"--speculative-num-draft-tokens {budget} and --speculative-dflash-block-size "
                               f"{alias} differ (SGLang raises; they are the same setting)")
    budget = budget if budget is not None else alias
    block = report.block_size
    if budget is not None and block is not None:
        if budget > block:
            report.problems.append(f"draft budget {budget} > the draft's block size {block}: a block cannot "
                                   "draft more tokens than it has")
        elif budget < block:
            report.notes.append(f"draft budget {budget} < block size {block}: SGLang drafts blocks of {budget} "
                                f"with a draft trained on {block} (logs 'DFLASH block size mismatch')")
    if flags.get("enable-linear-replayssm-spec"):
        topk = flags.get("speculative-eagle-topk", 1)
        if topk != 1:
            report.problems.append(f"--enable-linear-replayssm-spec needs a linear draft chain (topk 1), got {topk}")
        report.notes.append("--enable-linear-replayssm-spec: DFlash2's ReplaySSM verify path works for KDA "
                            "linear-attention targets only; Qwen3.8 is GDN, remove the flag there")



def run_check(path: str, expect: str | None = None, flags: dict | None = None,
              out: Callable[[str], None] = print) -> int:
    """`loadgen check-draft`: print the verdict; 1 when the draft is not `expect` or anything is wrong. `flags`:
    the launch flags the draft is checked against (`--profile`'s)."""
    report = check_draft(path, flags)
    for line in report.lines():
        out(line)
    if expect is not None and report.kind != expect:
        out(f"FAIL: expected {expect}, SGLang would run this draft as {report.kind}")
        return 1
    return 1 if report.problems else 0
