"""prompts.input_tokens without a server: the config and flag, the fit, and prompts built to a length."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).parents[2]


@pytest.mark.parametrize("value,line", [
    ("lots", "error: --input-tokens: 'lots' is neither a token count nor a range MIN-MAX"),
    ("2048-512", "error: --input-tokens: 512 is below min = 2048"),
    ("0", "error: --input-tokens: must be a whole number of tokens from 1"),
])
def test_a_wrong_flag_is_named_in_one_line(value, line):
    out = subprocess.run([sys.executable, "-m", "loadgen.cli", "run", "--url", "http://127.0.0.1:1", "--requests",
                          "1", "--concurrency", "1", "--input-tokens", value], capture_output=True, text=True,
                         timeout=60, cwd=REPO)
    assert out.returncode == 2 and out.stderr.startswith(line) and len(out.stderr.splitlines()) == 1, out.stderr
