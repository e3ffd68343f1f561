"""What a run records about the code that ran it."""

from __future__ import annotations

import subprocess
from pathlib import Path

from loadgen.driver.rows import git_commit


def test_git_commit_is_the_checkouts_or_the_one_passed_by_a_job_submitter(monkeypatch):
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                          cwd=Path(__file__).parents[1]).stdout.strip()
    monkeypatch.delenv("LOADGEN_GIT_COMMIT", raising=False)
    assert git_commit() == (head or None)
    monkeypatch.setenv("LOADGEN_GIT_COMMIT", "0123abcd")   # ray job submit uploads the tree without .git
    assert git_commit() == "0123abcd"
