"""The embedded Ray (no cluster given) keeps Ray's default, token auth, and its token file is the owner's only."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).parents[2]

PROBE = """
import os, ray
from loadgen.driver import ray_setup
ray_setup.connect()
print("mode", os.environ.get("RAY_AUTH_MODE"))
print("task", ray.get(ray.remote(lambda: 41 + 1).remote()))
ray.shutdown()
"""


def test_embedded_ray_uses_token_auth_with_an_owner_only_token(tmp_path):
    """A user with no token yet (a fresh HOME, no RAY_AUTH_* set): the local Ray starts in token mode and the
    token Ray uses is ~/.ray/auth_token with mode 0600 (Ray itself would write it with the umask: 0644)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    env.update(HOME=str(tmp_path), PYTHONPATH=str(REPO))
    run = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=180, env=env,
                         cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "mode token" in run.stdout and "task 42" in run.stdout
    assert "Token authentication is enabled" not in run.stderr   # Ray's warning for its default: loadgen's too
    token = tmp_path / ".ray" / "auth_token"
    assert stat.S_IMODE(token.stat().st_mode) == 0o600 and len(token.read_text()) == 64
    assert stat.S_IMODE(token.parent.stat().st_mode) == 0o700
    assert token.read_text() not in run.stdout + run.stderr
