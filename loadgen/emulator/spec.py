"""Turn SGLang's speculative flags into one resolved configuration, with SGLang's own defaults and fix-ups."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

from loadgen.emulator import profiles
from loadgen.emulator.drafts import DFlashDraft, read_dflash_draft
from loadgen.emulator.profiles import AlgorithmProfile
from loadgen.errors import ConfigError

log = logging.getLogger("loadgen.emulator")

ALGORITHMS = ("NONE", "EAGLE", "EAGLE3", "NEXTN", "DFLASH")
_PROFILE_OF = {"NONE": "none", "EAGLE": "eagle", "EAGLE3": "eagle", "NEXTN": "mtp"}


@dataclass(frozen=True, slots=True)
class SpecConfig:
    """The speculative setup a server runs with: what /get_server_info reports and the engine uses."""

    algorithm: str | None            # SGLang's speculative_algorithm (None when off)
    num_steps: int | None
    eagle_topk: int | None
    num_draft_tokens: int | None
    draft_model_path: str | None
    profile: AlgorithmProfile
    dflash: DFlashDraft | None = None

    @property
    def enabled(self) -> bool:
        return self.algorithm is not None

    @property
    def verify_tokens(self) -> int:
        """Tokens the target verifies per request per decode step (1 without speculation)."""
        if not self.enabled:
            return 1
        assert self.num_draft_tokens is not None   # resolve() sets it whenever speculation is on
        return self.num_draft_tokens

    @property
    def variant(self) -> str:
        """Human label: mtp, eagle, dflash1, dflash2 or none."""
        return self.profile.name


def _positive(flag: str, value: int | None) -> None:
    if value is not None and value < 1:
        raise ConfigError(flag, f"must be >= 1, got {value}", "pass a positive integer")


def resolve(algorithm: str | None, num_steps: int | None, topk: int | None, draft_tokens: int | None,
            draft_path: str | None) -> SpecConfig:
    """Apply SGLang's rules: NEXTN is an EAGLE chain; topk 1 forces draft tokens = steps + 1;
    DFLASH forces steps = topk = 1 and defaults the draft tokens to the draft's block size."""
    algo = (algorithm or "NONE").upper()
    if algo not in ALGORITHMS:
        raise ConfigError("--speculative-algorithm", f"unknown algorithm {algorithm!r}", f"use one of {ALGORITHMS}")
    for flag, val in (("--speculative-num-steps", num_steps), ("--speculative-eagle-topk", topk),
                      ("--speculative-num-draft-tokens", draft_tokens)):
        _positive(flag, val)
    if algo == "NONE":
        return SpecConfig(None, None, None, None, None, profiles.load("algorithms", "none"))
    if algo == "DFLASH":
        draft = read_dflash_draft(draft_path)
        prof = profiles.load("algorithms", f"dflash{draft.version}")
        if draft.version == 1 and draft.architecture == "DFlash2DraftModel":
            log.warning("draft %s is named DFlash2DraftModel but lacks %s: running as DFlash1",
                        draft_path, ", ".join(draft.missing_keys))
        tokens = draft_tokens or draft.block_size
        if tokens > draft.block_size:
            raise ConfigError("--speculative-num-draft-tokens", f"{tokens} exceeds the draft's block_size "
                              f"{draft.block_size}", f"use at most {draft.block_size}")
        return SpecConfig("DFLASH", 1, 1, tokens, draft_path, prof, draft)
    prof = profiles.load("algorithms", _PROFILE_OF[algo])
    k = topk or prof.default_eagle_topk
    if num_steps is None and draft_tokens is not None and k == 1:
        num_steps = draft_tokens - 1
    steps = num_steps or prof.default_num_steps
    tokens = draft_tokens or (steps + 1 if k == 1 else prof.default_num_draft_tokens)
    if k == 1 and tokens != steps + 1:
        log.warning("speculative_num_draft_tokens adjusted to speculative_num_steps + 1 = %d (topk 1)", steps + 1)
        tokens = steps + 1
    if steps < 1:
        raise ConfigError("--speculative-num-draft-tokens", "a draft chain needs at least 2 draft tokens",
                          "pass --speculative-num-draft-tokens >= 2")
    return SpecConfig(algo, steps, k, tokens, draft_path, prof)


def with_profile(spec: SpecConfig, path: str | None) -> SpecConfig:
    """The spec with its algorithm profile read from `path` (--algorithm-profile): other numbers for the same kind
    of draft (a chain stays a chain), e.g. a hidden profile in a test or a twin's fitted one."""
    if path is None:
        return spec
    if not path.endswith(".toml"):
        raise ConfigError("--algorithm-profile", f"{path!r} is not a .toml path", "give a profile file's path")
    prof = profiles.load("algorithms", path)
    if prof.draft != spec.profile.draft:
        raise ConfigError("--algorithm-profile", f"{path} drafts as {prof.draft!r}, the algorithm as "
                          f"{spec.profile.draft!r}", "use a profile of the same draft kind (chain, block or none)")
    return dataclasses.replace(spec, profile=prof)
