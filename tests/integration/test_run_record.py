"""What a run records about the code that ran it."""

from __future__ import annotations

import subprocess
from pathlib import Path

from loadgen.driver.rows import git_commit


def test_git_commit_is_the_checkouts_or_the_one_passed_by_a_job_submitter(monkeypatch):
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                          cwd=Path(__file__).parents[2]).stdout.strip()
    monkeypatch.delenv("LOADGEN_GIT_COMMIT", raising=False)
    assert git_commit() == (head or None)
    monkeypatch.setenv("LOADGEN_GIT_COMMIT", "0123abcd")   # ray job submit uploads the tree without .git
    assert git_commit() == "0123abcd"


def test_an_installed_loadgen_inside_another_checkout_records_no_commit(monkeypatch, tmp_path):
    monkeypatch.delenv("LOADGEN_GIT_COMMIT", raising=False)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(tmp_path)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "other project"], check=True)
    other = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    site = tmp_path / "venv" / "lib" / "python3.11"   # where a wheel's loadgen/ would sit: not that repo's top
    site.mkdir(parents=True)
    assert git_commit(site) is None
    assert git_commit(tmp_path) == other
