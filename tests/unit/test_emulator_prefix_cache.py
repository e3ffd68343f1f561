"""The emulator's radix cache and task families: what it reports is what it was sent (ground truth for the
conversation and shared-prefix tests), a cached prefix costs less prefill, and each family accepts as its profile
says (the Spec-Bench ratios in profiles/algorithms/*.toml)."""

from __future__ import annotations

import pytest

from loadgen.emulator.calibration import spec_for
from loadgen.emulator.prefixcache import PrefixCache, cache_tokens
from loadgen.emulator.promptinfo import estimate_tokens, infer_kind
from loadgen.emulator.request import EmuRequest
from loadgen.emulator.simulate import build_engine, closed_loop

SPEC_BENCH_RATIO = {"translation": 1.99 / 2.67, "summarization": 2.23 / 2.67, "qa": 2.12 / 2.67,
                    "math": 1.0, "rag": 2.04 / 2.67}   # EAGLE's per-task speedup / its conversation speedup


def test_match_is_the_longest_cached_prefix():
    cache = PrefixCache(1000)
    cache.insert(cache_tokens("abcdefghijkl"))              # 3 tokens
    assert cache.match(cache_tokens("abcdefghijkl")) == 3
    assert cache.match(cache_tokens("abcdefgh--kl")) == 2      # diverges in the third token
    assert cache.match(cache_tokens("xbcdefghijkl")) == 0
    assert cache.match([1, 2, 3]) == 0
    cache.insert([1, 2, 3])
    assert cache.match([1, 2, 4]) == 2
    cache.clear()
    assert cache.match(cache_tokens("abcdefghijkl")) == 0


def test_eviction_takes_the_least_recently_used_leaves_first():
    cache = PrefixCache(5)
    cache.insert(["s", "a", "b"])     # path 1
    cache.insert(["s", "c", "d"])     # path 2 shares "s"
    assert len(cache) == 5
    cache.match(["s", "a", "b"])      # path 1 used again: path 2's leaves are the oldest
    cache.insert(["t", "u"])          # 7 entries: two evicted, path 2's leaf and then its middle
    assert len(cache) == 5
    assert cache.match(["s", "a", "b"]) == 3
    assert cache.match(["s", "c", "d"]) == 1          # the shared "s" stayed
    assert cache.match(["t", "u"]) == 2


def _prefill_seconds(engine, req: EmuRequest) -> float:
    engine.submit(req)
    kind, batch, seconds = engine.plan_step()
    assert kind == "prefill" and batch == [req]
    return seconds


def _finish(engine) -> None:
    while (step := engine.plan_step()) is not None:
        engine.complete_step(step[0], step[1])


def _request(rid: str, prompt: str) -> EmuRequest:
    return EmuRequest(id=rid, rid=rid, kind=infer_kind(prompt), route="sim", prompt_tokens=estimate_tokens(prompt),
                      max_new_tokens=64, ignore_eos=True, stream_interval=1, prompt=prompt)


def test_a_conversation_turn_hits_its_history_and_prefills_only_the_rest():
    engine = build_engine(spec_for("mtp"))
    first = _request("t1", "The harbour was quiet at dawn. " * 300 + "\n\nWhat happens next?")
    cold = _prefill_seconds(engine, first)
    _finish(engine)
    assert first.cached_tokens == 0
    second = _request("t2", first.prompt + first.text + "\n\nUser: Make it shorter.\n\nAssistant:")
    warm = _prefill_seconds(engine, second)
    # cached: every whole 4-character token of the first prompt + its answer (the emulator's own tokens)
    assert second.cached_tokens == (len(first.prompt) + len(first.text)) // 4
    assert warm < 0.2 * cold
    _finish(engine)
    engine.flush()                                   # /flush_cache empties the tree, as SGLang's does
    third = _request("t3", second.prompt)
    _prefill_seconds(engine, third)
    assert third.cached_tokens == 0


def test_requests_prefilled_together_do_not_hit_each_other_and_a_later_one_does():
    engine = build_engine(spec_for("mtp"))
    shared = "You are the support assistant of a small library. " * 40
    a, b = _request("a", shared + "1. When?"), _request("b", shared + "2. Where?")
    engine.submit(a)
    engine.submit(b)
    kind, batch, _ = engine.plan_step()
    assert kind == "prefill" and batch == [a, b] and a.cached_tokens == b.cached_tokens == 0
    engine.complete_step(kind, batch)                # prefilled: their prompts are in the cache
    c = _request("c", shared + "3. Why?")
    engine.submit(c)
    engine.plan_step()
    assert c.cached_tokens == len(shared) // 4


def test_without_the_radix_cache_nothing_is_cached():
    engine = build_engine(spec_for("mtp"), prefix_cache=False)
    first = _request("t1", "x" * 4000)
    _prefill_seconds(engine, first)
    _finish(engine)
    second = _request("t2", first.prompt + first.text + "more")
    _prefill_seconds(engine, second)
    assert second.cached_tokens == 0


FAMILY_PROMPTS = {
    "translation": "Translate the following paragraph into German.\n\nThe harbour was quiet at dawn.",
    "summarization": "Summarize the following release notes in three bullet points.\n\nFixed a crash.",
    "qa": "Answer the following question in two or three sentences.\n\nWhat does a lighthouse keeper do?",
    "math": "Solve the following problem step by step.\n\nA baker sells 12 loaves a day for 5 days. How many?",
    "rag": "Answer the question using only the documents below.\n\n[Document 1] Ferries run hourly.",
}


def test_families_are_recognised_from_the_instruction():
    for family, prompt in FAMILY_PROMPTS.items():
        assert infer_kind(prompt) == family
        assert infer_kind(f"User: {prompt}\n\nAssistant: ...\n\nUser: Now make it shorter.\n\nAssistant:") == family
    assert infer_kind("Continue the story in the same voice.") == "prose"   # the calibration's prose stays prose


@pytest.mark.parametrize("setup", ["mtp", "dflash2"])
def test_each_family_accepts_its_spec_bench_share_of_conversation(setup):
    prose = closed_loop(build_engine(spec_for(setup), seed=3), 4, ["Tell me about the harbour at dawn. " * 10],
                        64, warmup_s=5, measure_s=600).accept_length
    for family, prompt in FAMILY_PROMPTS.items():
        got = closed_loop(build_engine(spec_for(setup), seed=3), 4, [prompt], 64, warmup_s=5,
                          measure_s=600).accept_length
        assert got == pytest.approx(prose * SPEC_BENCH_RATIO[family], rel=0.05), family
