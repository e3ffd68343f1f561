"""`loadgen run`'s flags become the same experiment a file would give, and a wrong one is named in one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).parents[2]


@pytest.mark.parametrize("flags,line", [
    (["--concurrency", "1", "--rate", "2"], "error: --concurrency: give exactly one of --concurrency"),
    (["--concurrency", "2", "--arrival", "poisson"], "error: --arrival: only applies to --rate"),
    (["--concurrency", "1", "--prompts", "foo"], "error: --prompts: 'foo' is neither a built-in mix"),
    (["--concurrency", "1", "--prompts", "jsonl:/no/such.jsonl"], "error: --prompts: no such file"),
    (["--concurrency", "1", "--flavor", "sglang", "--model", "x"], "error: --model: only applies to openai-*"),
    (["--rate", "0"], "error: --rate: must be a number of requests/s > 0"),
])
def test_a_wrong_flag_is_one_line_before_any_load(flags, line):
    out = subprocess.run([sys.executable, "-m", "loadgen.cli", "run", "--url", "http://127.0.0.1:1",
                          "--requests", "1", *flags], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert out.returncode == 2 and out.stderr.startswith(line) and len(out.stderr.splitlines()) == 1, out.stderr
