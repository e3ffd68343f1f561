"""Read a DFlash draft's config.json the way SGLang does, to pick DFlash1 or DFlash2 behaviour.

DFlash2 needs BOTH the architecture name `DFlash2DraftModel` and the four `dflash_config` keys
(conv_kernel_size, conv_group_size, selector_rank, selector_top_k). A draft missing them silently runs as
DFlash1 (the field report's deployment trap), and so does the emulator.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from loadgen.errors import ConfigError

DFLASH2_KEYS = ("conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k")


@dataclass(frozen=True, slots=True)
class DFlashDraft:
    """What the emulator takes from a DFlash draft folder."""

    version: int                 # 1 or 2
    block_size: int
    architecture: str
    missing_keys: tuple[str, ...]  # DFlash2 keys absent (why a DFlash2-named draft runs as DFlash1)


def read_dflash_draft(path: str | None) -> DFlashDraft:
    """Parse `<path>/config.json`; raise ConfigError naming the flag when it cannot be used."""
    flag = "--speculative-draft-model-path"
    if not path:
        raise ConfigError(flag, "DFLASH needs a draft model path", "pass the draft folder holding config.json")
    cfg_file = Path(path) / "config.json"
    if not cfg_file.is_file():
        raise ConfigError(flag, f"{cfg_file} does not exist", "point at a DFlash draft folder with config.json")
    try:
        cfg = json.loads(cfg_file.read_text())
    except json.JSONDecodeError as exc:
        raise ConfigError(flag, f"{cfg_file} is not JSON: {exc}", "fix the draft's config.json") from exc
    archs = cfg.get("architectures") or [""]
    arch = str(archs[0])
    dcfg = cfg.get("dflash_config") or {}
    block = dcfg.get("block_size", cfg.get("block_size", 16))
    if not isinstance(block, int) or block < 2:
        raise ConfigError(f"{cfg_file}:block_size", f"must be an integer >= 2, got {block!r}", "fix config.json")
    missing = tuple(k for k in DFLASH2_KEYS if k not in dcfg)
    version = 2 if arch == "DFlash2DraftModel" and not missing else 1
    return DFlashDraft(version=version, block_size=block, architecture=arch, missing_keys=missing)
