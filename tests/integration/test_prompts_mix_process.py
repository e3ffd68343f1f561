"""The seeded sequence: determinism, prefix property, weights, bounds, labels, and the two forms."""

from __future__ import annotations

import os
import subprocess
import sys

from loadgen.prompts.mix import PromptMix, parse_prompts_config


def mix(**table) -> PromptMix:
    return PromptMix(parse_prompts_config(table))


def test_sequence_is_the_same_in_another_process():
    """Same ids whatever PYTHONHASHSEED: nodes and levels send the same work."""
    code = ("from loadgen.prompts.mix import PromptMix, parse_prompts_config;"
            "print('\\n'.join(p.prompt_id for p in PromptMix(parse_prompts_config({'seed': 9})).take(40)))")
    outs = [
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                       env={**os.environ, "PYTHONHASHSEED": seed}).stdout.split()
        for seed in ("1", "2")
    ]
    assert outs[0] == outs[1] == [p.prompt_id for p in mix(seed=9).take(40)]
