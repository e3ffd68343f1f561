"""check-draft: DFlash2 vs (silently) DFlash1 vs broken drafts, and launch-profile flags against the draft."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadgen.cli import main as cli
from loadgen.servers.draftcheck import check_draft

DRAFTS = Path(__file__).parents[2] / "loadgen/emulator/drafts"
DFLASH2 = json.loads((DRAFTS / "dflash2/config.json").read_text())


def _draft(tmp_path: Path, cfg, name: str = "draft") -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(cfg if isinstance(cfg, str) else json.dumps(cfg))
    return folder


def _without(*keys: str) -> dict:
    cfg = json.loads(json.dumps(DFLASH2))
    for k in keys:
        del cfg["dflash_config"][k]
    return cfg


def test_example_drafts_are_what_they_say():
    two, one = check_draft(DRAFTS / "dflash2"), check_draft(DRAFTS / "dflash1" / "config.json")
    assert (two.kind, two.block_size, two.problems) == ("dflash2", 8, [])
    assert (one.kind, one.block_size, one.problems) == ("dflash1", 8, [])


def test_dflash2_keys_under_a_dflash1_architecture_run_as_dflash1(tmp_path):
    cfg = dict(DFLASH2, architectures=["DFlashDraftModel"])
    report = check_draft(_draft(tmp_path, cfg))
    assert report.kind == "dflash1" and not report.problems
    assert "DFlash2DraftModel" in " ".join(report.notes)
    assert cli(["check-draft", str(_draft(tmp_path, cfg, "d2")), "--expect", "dflash2"]) == 1
    assert cli(["check-draft", str(_draft(tmp_path, cfg, "d3"))]) == 0   # a valid DFlash1 draft


@pytest.mark.parametrize("cfg,words", [
    ("{not json", "not JSON"),
    ([1, 2], "not a JSON object"),
    (dict(DFLASH2, architectures=["LlamaForCausalLM"]), "not a DFlash draft"),
    ({k: v for k, v in DFLASH2.items() if k != "architectures"}, "not a DFlash draft"),
    (_without("conv_group_size"), "come in a pair"),
    (_without("selector_top_k"), "come in a pair"),
    (_without("selector_rank", "selector_top_k"), "needs dflash_config.selector_rank"),
    (_without("conv_kernel_size", "conv_group_size"), "without conv_kernel_size, conv_group_size"),
    (dict(DFLASH2, dflash_config=dict(DFLASH2["dflash_config"], block_size=0)), "block_size"),
    (dict(DFLASH2, dflash_config=dict(DFLASH2["dflash_config"], selector_rank="256")), "whole number"),
])
def test_broken_drafts(tmp_path, cfg, words, capsys):
    folder = _draft(tmp_path, cfg)
    report = check_draft(folder)
    assert report.kind == "broken" and words in " ".join(report.problems), report.problems
    assert cli(["check-draft", str(folder)]) == 1
    assert "broken" in capsys.readouterr().out


def test_missing_folder_says_how_to_fix(tmp_path):
    report = check_draft(tmp_path / "nope")
    assert report.kind == "broken" and "download the draft" in report.problems[0]


def test_expect_dflash2_passes_only_for_dflash2(capsys):
    assert cli(["check-draft", str(DRAFTS / "dflash2"), "--expect", "dflash2"]) == 0
    assert cli(["check-draft", str(DRAFTS / "dflash1"), "--expect", "dflash2"]) == 1
    assert "expected dflash2" in capsys.readouterr().out


@pytest.mark.parametrize("flags,problem", [
    ({"speculative-algorithm": "NEXTN"}, "only with --speculative-algorithm DFLASH"),
    ({"speculative-algorithm": "DFLASH", "speculative-num-draft-tokens": 16}, "16 > the draft's block size 8"),
    ({"speculative-algorithm": "DFLASH", "speculative-num-draft-tokens": 8, "speculative-dflash-block-size": 4},
     "differ"),
    ({"speculative-algorithm": "DFLASH", "speculative-eagle-topk": 4}, "forces it to 1"),
    ({"speculative-algorithm": "DFLASH", "speculative-num-steps": 3}, "forces it to 1"),
    ({"speculative-algorithm": "DFLASH", "speculative-eagle-topk": 2, "enable-linear-replayssm-spec": True},
     "linear draft chain"),
])
def test_profile_flags_against_the_draft(flags, problem):
    report = check_draft(DRAFTS / "dflash2", flags)
    assert report.kind == "dflash2" and problem in " ".join(report.problems), report.problems


def test_shipped_dflash2_profiles_pass_against_a_dflash2_draft(capsys):
    for budget in (4, 6, 8):
        assert cli(["check-draft", str(DRAFTS / "dflash2"), "--expect", "dflash2",
                    "--profile", f"dflash2-b{budget}"]) == 0
    out = capsys.readouterr().out
    assert "budget 4 < block size 8" in out and "problem" not in out
    assert cli(["check-draft", str(DRAFTS / "dflash2"), "--profile", "mtp"]) == 1
