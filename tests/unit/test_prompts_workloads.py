"""Task families, conversations and shared contexts on the prompt side: labels the emulator agrees with, seeded
sessions whose later turns append the server's answers exactly, distinct shared contexts, and every bad key a
one-line ConfigError."""

from __future__ import annotations

import collections
import random
import statistics

import pytest

from loadgen.errors import ConfigError
from loadgen.prompts.conversation import Spread, first_turn, next_turn, transcript_turn
from loadgen.prompts.families.material import license_sections, zen
from loadgen.prompts.length import LengthFit, LengthModel, prompt_texts
from loadgen.prompts.mix import PromptMix, parse_prompts_config
from loadgen.prompts.shared_prefix import CLOSING


def mix(**table) -> PromptMix:
    return PromptMix(parse_prompts_config(table))


def test_family_material_ships_with_python():
    assert len(zen()) == 19 and zen()[0] == "Beautiful is better than ugly."
    assert any("PYTHON SOFTWARE FOUNDATION LICENSE" in s for s in license_sections())


def test_templates_narrow_a_family_and_unknown_ones_are_named():
    prompts = mix(sources=[{"kind": "translation", "templates": ["zen"]}]).take(8)
    assert {p.template for p in prompts} == {"translation/zen"}
    assert len({p.text for p in prompts}) == 8        # the eight target languages
    with pytest.raises(ConfigError, match=r"prompts.sources\[0\].templates.*choose from paragraph, docstring, zen"):
        parse_prompts_config({"sources": [{"kind": "translation", "templates": ["poem"]}]})


def conversations(**source) -> list:
    return mix(seed=5, sources=[{"kind": "conversation", **source}]).take(200)


def test_a_session_draws_its_turns_follow_ups_and_think_times_from_its_opening_task():
    prompts = conversations(turns={"min": 2, "max": 4}, think_time_s={"min": 1, "max": 3}, tasks=["code", "math"])
    assert {p.kind for p in prompts} == {"code", "math"}
    assert all(p.template.startswith("conversation/") and p.prompt_id.startswith("conversation/") for p in prompts)
    assert {p.conversation.turns for p in prompts} == {2, 3, 4}
    assert all(1 <= t <= 3 for p in prompts for t in p.conversation.think_s)
    assert all(len(set(p.conversation.follow_ups)) == len(p.conversation.follow_ups) for p in prompts)
    again = conversations(turns={"min": 2, "max": 4}, think_time_s={"min": 1, "max": 3}, tasks=["code", "math"])
    assert again == prompts                          # seeded: the same sessions on every node and level


def test_turn_and_think_time_distributions():
    rng = random.Random(1)
    turns = [Spread(1, 100, 4.0).draw(rng, whole=True) for _ in range(20000)]
    assert statistics.fmean(turns) == pytest.approx(4.0, rel=0.05) and min(turns) == 1
    capped = [Spread(1, 6, 4.0).draw(rng, whole=True) for _ in range(2000)]
    assert max(capped) == 6
    think = [Spread(0, 3600, 5.0).draw(rng, whole=False) for _ in range(20000)]
    assert statistics.fmean(think) == pytest.approx(5.0, rel=0.05)
    assert Spread(3, 3).draw(rng, whole=True) == 3


def test_later_turns_are_the_history_with_the_answers_exactly_as_the_server_sent_them():
    [opening] = [p for p in conversations(turns=3, shared_prefix_tokens=64)[:5] if p.conversation.turns == 3][:1]
    assert opening.text.endswith("\n\nAssistant:") and "User: " in opening.text
    one = first_turn(opening, "sess")
    assert (one.session_id, one.turn, one.conversation, one.text) == ("sess", 1, None, opening.text)
    answers = [" First answer,\nwith a line break.", " Second answer."]
    two = next_turn(opening, answers[:1], "sess")
    three = next_turn(opening, answers, "sess")
    f1, f2 = opening.conversation.follow_ups
    assert two.text == opening.text + answers[0] + "\n\n" + transcript_turn(f1)
    assert three.text == two.text + answers[1] + "\n\n" + transcript_turn(f2)
    assert (three.session_id, three.turn, three.prompt_id) == ("sess", 3, f"{opening.prompt_id}@3")
    assert three.shared_prefix == opening.shared_prefix and three.reuses_prefix


def test_chat_turns_carry_the_answers_as_assistant_messages():
    opening = mix(seed=5, chat=True, system_prefix="Be brief.",
                  sources=[{"kind": "conversation", "turns": 3, "tasks": ["prose"]}]).take(1)[0]
    three = next_turn(opening, ["A1", "A2"], "s")
    f1, f2 = opening.conversation.follow_ups
    assert three.messages == opening.messages + (
        {"role": "assistant", "content": "A1"}, {"role": "user", "content": f1},
        {"role": "assistant", "content": "A2"}, {"role": "user", "content": f2})
    assert three.messages[0] == {"role": "system", "content": "Be brief."}


def test_shared_contexts_are_distinct_and_each_prompt_starts_with_one():
    prompts = mix(seed=3, sources=[{"kind": "qa", "shared_prefix_tokens": 300, "prefixes": 4}]).take(400)
    contexts = {}
    for p in prompts:
        head = p.text.split(CLOSING, 1)[0] + CLOSING
        assert contexts.setdefault(p.shared_prefix, head) == head       # one text per label
        assert p.text[len(head):].startswith("\n\nAnswer the following question")   # the request's own part after
    assert sorted(contexts) == [f"qa#{k}" for k in range(4)]
    assert len({c[:40] for c in contexts.values()}) == 4                # they differ from the start
    assert all(abs(len(c) - 300 * 4) < 200 for c in contexts.values())  # ~4 characters a token without a fit
    counts = collections.Counter(p.shared_prefix for p in prompts)
    assert min(counts.values()) > 70                                     # drawn uniformly (100 each expected)
    assert all(p.reuses_prefix for p in prompts)
    # the task sequence is the one without shared contexts
    plain = mix(seed=3, sources=[{"kind": "qa"}]).take(400)
    assert [p.prompt_id for p in plain] == [p.prompt_id for p in prompts]
    assert not any(p.reuses_prefix for p in plain)


def test_with_input_tokens_the_shared_context_counts_in_each_prompt_and_follows_the_fit():
    fit = LengthFit(overhead=10.0, slope=1 / 3.0, chars_per_token=3.0)
    model = LengthModel((("*", fit),), counted=True)
    cfg = parse_prompts_config({"seed": 1, "input_tokens": 900, "chat": True,
                                "sources": [{"kind": "prose", "shared_prefix_tokens": 400, "prefixes": 2}]})
    for p in PromptMix(cfg, model).take(20):
        assert fit.estimate(prompt_texts(p)) == pytest.approx(900, rel=0.02)
        system = p.messages[0]["content"]
        assert p.messages[0]["role"] == "system" and abs(len(system) - 400 * 3) < 150


@pytest.mark.parametrize("source, key, message", [
    ({"kind": "conversation", "turns": 0}, "turns", "from 1 to 100"),
    ({"kind": "conversation", "turns": {"min": 4, "max": 2}}, "turns.max", "below min"),
    ({"kind": "conversation", "turns": {"mean": 3, "min": 1}}, "turns", r"\{ min, max \} or \{ mean\[, max\] \}"),
    ({"kind": "conversation", "turns": 2.5}, "turns", "an integer"),
    ({"kind": "conversation", "think_time_s": -1}, "think_time_s", "from 0 to 3600"),
    ({"kind": "conversation", "tasks": ["poetry"]}, "tasks", "built-in kinds"),
    ({"kind": "conversation", "templates": ["essay"]}, "templates", "unknown key"),
    ({"kind": "code", "prefixes": 3}, "prefixes", "needs shared_prefix_tokens"),
    ({"kind": "code", "shared_prefix_tokens": 4}, "shared_prefix_tokens", "from 16"),
    ({"kind": "code", "shared_prefix_tokens": 64, "prefixes": 0}, "prefixes", "from 1 to 1000"),
    ({"kind": "novel"}, "kind", "unknown built-in source"),
])
def test_bad_keys_are_named(source, key, message):
    with pytest.raises(ConfigError, match=rf"prompts\.sources\[0\]\.{key}: .*{message}"):
        parse_prompts_config({"sources": [source]})


def test_a_shared_context_as_long_as_the_input_is_refused():
    with pytest.raises(ConfigError, match=r"shared_prefix_tokens: 1024 leaves no room in input_tokens = 512-2048"):
        parse_prompts_config({"input_tokens": {"min": 512, "max": 2048},
                              "sources": [{"kind": "code", "shared_prefix_tokens": 1024}]})
