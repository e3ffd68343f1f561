"""Protocol rules beyond the frame shapes: OpenAI stream rules, auth, queue limit, metrics, start-up, drafts."""

from __future__ import annotations

import json

import pytest

from loadgen.emulator.calibration import spec_for
from loadgen.emulator.drafts import read_dflash_draft
from loadgen.emulator.engine import resolve_min_free_slots
from loadgen.emulator.launch import EmulatorThread
from loadgen.emulator.promptinfo import infer_kind
from loadgen.emulator.request import EmuRequest
from loadgen.emulator.simulate import build_engine
from loadgen.emulator.spec import resolve
from loadgen.errors import ConfigError


@pytest.fixture(scope="module")
def mtp():
    with EmulatorThread(["--speculative-algorithm", "NEXTN", "--time-scale", "50", "--enable-metrics"]) as emu:
        yield emu


def test_dflash2_draft_without_conv_selector_keys_runs_as_dflash1(tmp_path):
    cfg = json.load(open("loadgen/emulator/drafts/dflash2/config.json"))
    for k in ("conv_kernel_size", "selector_top_k"):
        del cfg["dflash_config"][k]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    trap = read_dflash_draft(str(tmp_path))
    assert trap.version == 1 and trap.missing_keys == ("conv_kernel_size", "selector_top_k")
    assert read_dflash_draft("loadgen/emulator/drafts/dflash2").version == 2
    assert read_dflash_draft("loadgen/emulator/drafts/dflash1").version == 1
    good = resolve("DFLASH", None, None, None, "loadgen/emulator/drafts/dflash2")
    assert good.variant == "dflash2" and good.num_draft_tokens == 8 and good.num_steps == 1
    assert resolve("DFLASH", None, None, 8, str(tmp_path)).variant == "dflash1"
    with pytest.raises(ConfigError, match="--speculative-draft-model-path"):
        resolve("DFLASH", None, None, None, None)
    with pytest.raises(ConfigError, match="block_size"):
        resolve("DFLASH", None, None, 16, "loadgen/emulator/drafts/dflash2")


def test_eagle_chain_flags_follow_sglang_rules():
    e8 = resolve("EAGLE", None, 1, 8, None)
    assert (e8.num_steps, e8.num_draft_tokens) == (7, 8)
    assert resolve("EAGLE", 3, 1, 8, None).num_draft_tokens == 4       # topk 1: draft tokens = steps + 1
    assert resolve("NEXTN", None, None, None, None).num_draft_tokens == 4
    assert not resolve(None, None, None, None, None).enabled


def test_prompt_kind_comes_from_the_text():
    assert infer_kind("def f(x):\n    return x * 2\n") == "code"
    assert infer_kind("Write a Python function that parses a CSV file.") == "code"
    assert infer_kind("Tell me a story about a quiet harbour town at dawn.") == "prose"


def test_dflash1_accepts_less_than_dflash2_on_the_same_prompts(tmp_path):
    from loadgen.emulator.simulate import build_engine, closed_loop
    prompts = ["def f(x):\n    return x\n" * 20, "The harbour was quiet at dawn. " * 20]
    v2 = closed_loop(build_engine(resolve("DFLASH", None, None, 8, "loadgen/emulator/drafts/dflash2")), 4, prompts,
                     128, warmup_s=5, measure_s=60)
    v1 = closed_loop(build_engine(resolve("DFLASH", None, None, 8, "loadgen/emulator/drafts/dflash1")), 4, prompts,
                     128, warmup_s=5, measure_s=60)
    assert v1.accept_length < 0.8 * v2.accept_length and v1.tok_s < v2.tok_s


def test_min_free_slots_threshold_is_sglangs_formula():
    assert resolve_min_free_slots(None, 48, True) == 4      # SGLang's DFLASH default max_running_requests
    assert resolve_min_free_slots(None, 8, True) == 2
    assert resolve_min_free_slots(None, 7, True) is None
    assert resolve_min_free_slots(None, 64, False) is None
    assert resolve_min_free_slots(1, 64, True) is None
    assert resolve_min_free_slots(10, 6, False) == 6


def _request(i: int, max_new_tokens: int) -> EmuRequest:
    return EmuRequest(id=str(i), rid=None, kind="prose", route="sim", prompt_tokens=100,
                      max_new_tokens=max_new_tokens, ignore_eos=True, stream_interval=1)


@pytest.mark.parametrize(("setup", "next_kind"), [("dflash2", "decode"), ("mtp", "prefill")])
def test_dflash_holds_a_prefill_until_min_free_slots_are_free(setup, next_kind):
    """max_running 8 -> DFLASH waits for 2 free slots; one finished request frees only 1. MTP admits at once."""
    engine = build_engine(spec_for(setup), hardware="zero", max_running=8)
    for i in range(8):
        engine.submit(_request(i, 2 if i == 0 else 100))
    for expected in ("prefill", "decode"):          # request 0 finishes in the first decode step
        kind, batch, _ = engine.plan_step()
        assert kind == expected
        engine.complete_step(kind, batch)
    assert len(engine.running) == 7
    engine.submit(_request(8, 100))
    assert engine.plan_step()[0] == next_kind
