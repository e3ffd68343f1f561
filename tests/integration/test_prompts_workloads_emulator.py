"""Task families, conversations and shared contexts on the prompt side: labels the emulator agrees with, seeded
sessions whose later turns append the server's answers exactly, distinct shared contexts, and every bad key a
one-line ConfigError."""

from __future__ import annotations

import pytest

from loadgen.emulator.promptinfo import infer_kind
from loadgen.prompts.families import TEMPLATES, family_pools
from loadgen.prompts.mix import PromptMix, parse_prompts_config


def mix(**table) -> PromptMix:
    return PromptMix(parse_prompts_config(table))


@pytest.mark.parametrize("family", sorted(TEMPLATES))
def test_each_family_is_labelled_and_reads_as_that_family_to_the_emulator(family):
    """The label a request carries (prompt_kind) is what the emulator, which reads only the text, recognises."""
    prompts = mix(seed=2, sources=[{"kind": family}]).take(60)
    assert {p.kind for p in prompts} == {family}
    assert {p.template.split("/")[0] for p in prompts} == {family}
    assert all(infer_kind(p.text) == family for p in prompts)
    for pool in family_pools(family, TEMPLATES[family]):   # every template, the ends of its candidates too
        for i in {0, pool.size // 2, pool.size - 1} if pool.size else ():
            task = pool.render(i)
            assert task is not None and task.kind == family and infer_kind(task.text) == family, (pool.template, i)


def conversations(**source) -> list:
    return mix(seed=5, sources=[{"kind": "conversation", **source}]).take(200)
