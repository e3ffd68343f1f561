"""The capacity search as a pure function of verdicts: against a known threshold it finds it exactly, and it
spends few levels doing so; unclear levels are run again within the budget; the config is checked."""

from __future__ import annotations


def test_loadgen_run_names_a_bad_slo_flag_in_one_line_before_any_load():
    import subprocess
    import sys
    for slo, expected in (("ttft=3", "error: --slo ttft: unknown key (fix: did you mean `ttft_ms`?"),
                          ("ttft_ms", "error: --slo: 'ttft_ms' is not NAME=NUMBER"),
                          ("attainment=0.9", "error: --slo: has no per-request line")):
        out = subprocess.run([sys.executable, "-m", "loadgen.cli", "run", "--url", "http://127.0.0.1:1",
                              "--concurrency", "1", "--requests", "1", "--slo", slo],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 2 and out.stderr.startswith(expected), out.stderr
        assert len(out.stderr.splitlines()) == 1 and out.stdout == ""
