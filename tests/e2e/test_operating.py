"""What a user sees when something is wrong: one line on stderr naming the problem and the fix, nothing else
(no traceback, no leaked-session warning, no wall time after an error), from the real entry points."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from aiohttp import web

from conftest import serve_app
from loadgen.servers.ports import free_port

REPO = Path(__file__).parents[2]


def _job(config: Path, results: Path, timeout_s: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jobs.capacity", "--config", str(config), "--results", str(results)],
                          cwd=REPO, capture_output=True, text=True, timeout=timeout_s,
                          env=dict(os.environ, RAY_ADDRESS="", RAY_AUTH_MODE="disabled"))


def _target(tmp_path: Path, url: str) -> Path:
    config = tmp_path / "exp.toml"
    config.write_text(f'[load]\nconcurrency = [1]\nmeasure_s = 1.0\n[prompts]\nmax_new_tokens = 4\n'
                      f'[[targets]]\nname = "t"\nurl = "{url}"\nflavor = "sglang"\n')
    return config


def _ray_noise(line: str) -> bool:
    """Ray's own start-up lines (its INFO/WARNING logging), which loadgen does not print."""
    return re.match(r"\d{4}-\d\d-\d\d [\d:,]+\s+(INFO|WARNING) ", line) is not None


def test_a_config_error_is_one_line_before_ray(tmp_path):
    config = tmp_path / "exp.toml"
    config.write_text('[load]\nconcurrency = 4\n[[targets]]\nname = "a"\nurl = "http://127.0.0.1:30000"\n')
    job = _job(config, tmp_path / "results", 60)
    assert job.returncode == 2
    assert job.stderr.splitlines() == ["error: load.concurrency: must be a list, got int 4 "
                                       "(fix: write `concurrency = [4]`)"], job.stderr
    assert "wall time" not in job.stdout and "Ray" not in job.stdout + job.stderr


def test_an_unwritable_results_folder_is_refused_before_ray(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    job = _job(_target(tmp_path, "http://127.0.0.1:1"), blocker / "results", 60)
    assert job.returncode == 2
    [line] = job.stderr.splitlines()
    assert line.startswith(f"error: results folder {blocker / 'results'} is not writable") and "fix:" in line


def _only_line(run: subprocess.CompletedProcess) -> str:
    """The whole output of a run refused before Ray: exit 2, nothing on stdout, one line on stderr."""
    out = run.stdout + run.stderr
    assert run.returncode == 2 and run.stdout == "" and len(run.stderr.splitlines()) == 1, out
    assert "Traceback" not in out and "Unclosed" not in out and "Ray" not in out, out
    return run.stderr.strip()


def test_an_unreachable_url_is_one_line_before_ray(tmp_path):
    """Refused on the driver and not pinned to another node (loadgen.driver.reach): decided before Ray starts, from
    the job and from `loadgen run` alike (`localhost` too: every address it resolves to refuses)."""
    port = free_port()   # nothing listens there
    url = f"http://127.0.0.1:{port}"
    line = _only_line(_job(_target(tmp_path, url), tmp_path / "r1", 60))
    assert line == (f"error: target t: {url}: unreachable (connection refused: nothing listens on 127.0.0.1 port "
                    f"{port}) (fix: start the server, or correct the target's url)")
    run = subprocess.run([sys.executable, "-m", "loadgen.cli", "run", "--url", f"http://localhost:{port}",
                          "--concurrency", "1", "--requests", "1", "--results", str(tmp_path / "r2")],
                         cwd=REPO, capture_output=True, text=True, timeout=60, env=dict(os.environ, RAY_ADDRESS=""))
    line = _only_line(run)
    assert line.startswith(f"error: target target: http://localhost:{port}: unreachable (connection refused") and (
        "(fix: start the server" in line)


def test_a_loopback_url_pinned_to_a_node_is_left_to_its_worker(tmp_path):
    """A fleet's loopback url answers only on its node, so the driver does not decide it (loadgen.driver.reach): Ray
    starts, the worker's preflight on that node is refused at its first try, and that is the one error line."""
    import ray.util
    port = free_port()
    config = tmp_path / "fleet.toml"
    config.write_text(f'[load]\nconcurrency = [1]\nmeasure_s = 1.0\n[prompts]\nmax_new_tokens = 4\n'
                      f'[fleet]\nlaunch = "external"\n[[fleet.nodes]]\nname = "n1"\n'
                      f'node_ip = "{ray.util.get_node_ip_address()}"\nurl = "http://127.0.0.1:{port}"\n')
    job = subprocess.run([sys.executable, "-m", "jobs.fleet", "--config", str(config), "--results",
                          str(tmp_path / "r")], cwd=REPO, capture_output=True, text=True, timeout=180,
                         env=dict(os.environ, RAY_ADDRESS="", RAY_AUTH_MODE="disabled"))
    assert job.returncode == 2 and "fleet nodes: n1 = Ray node" in job.stdout, job.stdout + job.stderr
    errors = [line for line in job.stderr.splitlines() if not _ray_noise(line)]
    assert len(errors) == 1 and errors[0].startswith(f"error: http://127.0.0.1:{port}: unreachable"), job.stderr
    assert "Unclosed" not in job.stderr + job.stdout and "Traceback" not in job.stderr


def test_a_wrong_flavour_target_is_one_line(tmp_path):
    """A server that answers, but not as SGLang: only a worker's preflight can tell; still one line (besides
    Ray's own INFO line), no traceback, no unclosed session."""
    app = web.Application()

    async def not_sglang(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": []})
    app.router.add_get("/get_server_info", not_sglang)
    with serve_app(app) as url:
        job = _job(_target(tmp_path, url), tmp_path / "r2")
    assert job.returncode == 2
    errors = [line for line in job.stderr.splitlines() if not _ray_noise(line)]
    assert len(errors) == 1 and errors[0].startswith(f"error: {url}: ") and "SGLang" in errors[0], job.stderr
    assert "Unclosed" not in job.stderr + job.stdout and "Traceback" not in job.stderr


def test_report_without_matplotlib_names_the_extra(tmp_path):
    code = ("import sys; sys.modules['matplotlib'] = None  # as if not installed\n"
            "from loadgen.cli import main; sys.exit(main(['report', '--results', sys.argv[1]]))")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=REPO, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2
    assert out.stderr.splitlines() == ["error: the report's plots need matplotlib, which is not installed "
                                       "(fix: pip install 'loadgen[report]')"], out.stderr
