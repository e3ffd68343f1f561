"""loadgen installed from its wheel, not a checkout: a fresh virtual environment, run from a folder outside the
repo, finds its SQL, its launch profiles and its emulator's data as package data (issue 38: the wheel once held
no .sql file and `loadgen query --list` ended in a traceback)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest

from conftest import ray_head, small_job_toml, submit_job

REPO = Path(__file__).parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]   # a venv of its own, with Ray: minutes

EXPERIMENT = small_job_toml("wheel", "1, 2") + """[[targets]]
name = "dflash2"
[targets.emulator]
model-path = "m"
speculative-algorithm = "DFLASH"
speculative-draft-model-path = "{draft}"
speculative-num-draft-tokens = 8
"""

FLEET = """
[fleet]
name = "one"
launch = "sglang"
[[fleet.nodes]]
name = "spark1"
node_ip = "127.0.0.1"
"""

FLEET_EXPERIMENT = """
[load]
concurrency = [1]
[fleet]
file = "fleet.toml"
profiles = ["mtp", "dflash2-b4"]
[fleet.replace]
speculative-draft-model-path = "/drafts/dflash2"
"""

# Prints each stage's profile path and flags: a profile named in a fleet file resolves to the installed files
SHOW_FLEET = """
import json, sys
from loadgen.config import load_experiment
exp = load_experiment(sys.argv[1])
print(json.dumps([[s.name, p.source, p.flags] for s in exp.fleet.stages for p in s.profiles.values()]))
"""

# `loadgen query NAME --results results --format json` for every NAME in argv, through the installed CLI's main, in one
# process; prints name -> [exit code, its output]
EVERY_QUERY = """
import contextlib, io, json, sys
from loadgen.cli import main
out = {}
for name in sys.argv[1:]:
    with contextlib.redirect_stdout(io.StringIO()) as text:
        code = main(["query", name, "--results", "results", "--format", "json"])
    out[name] = [code, text.getvalue()]
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """The wheel (`pip wheel --no-deps`), installed with its dependencies and the report extra (from pip's cache
    and the local index, pinned by constraints.txt) into a fresh virtual environment; returns its bin folder."""
    root = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(root / "dist"), str(REPO)],
                   check=True, capture_output=True, timeout=300)
    [wheel] = (root / "dist").glob("loadgen-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {f"loadgen/results/queries/{p.name}" for p in (REPO / "queries").glob("*.sql")} <= set(names)
    assert {f"loadgen/config/profiles/{p.name}" for p in (REPO / "infra/profiles").glob("*.toml")} <= set(names)
    subprocess.run([sys.executable, "-m", "venv", str(root / "venv")], check=True, timeout=120)
    bin_dir = root / "venv" / "bin"
    # --no-compile: no bytecode for the thousands of modules no test imports
    subprocess.run([str(bin_dir / "pip"), "install", "-q", "--no-compile", "-c", str(REPO / "constraints.txt"),
                    f"{wheel}[report]"], check=True, capture_output=True, timeout=600)
    return bin_dir


@pytest.fixture
def outside(tmp_path) -> Path:
    """A working folder outside the repo (nothing of the checkout on the path)."""
    assert REPO not in tmp_path.parents
    return tmp_path


def _run(bin_dir: Path, cwd: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    done = subprocess.run(list(args), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{args}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def _site(bin_dir: Path, cwd: Path) -> Path:
    """The installed package's folder (site-packages/loadgen), not the checkout's."""
    out = _run(bin_dir, cwd, "python", "-c", "import loadgen; print(loadgen.__file__)").stdout.strip()
    package = Path(out).parent
    assert REPO not in package.parents and "site-packages" in package.parts, package
    return package


def test_the_wheel_runs_the_job_every_query_and_the_report(venv, outside):
    listed = _run(venv, outside, "loadgen", "query", "--list").stdout
    names = [line.split()[0] for line in listed.splitlines() if line and not line.startswith(" ")]
    assert set(names) == {p.stem for p in (REPO / "queries").glob("*.sql")} - {"views"}, listed
    draft = _site(venv, outside) / "emulator" / "drafts" / "dflash2"
    (outside / "exp.toml").write_text(EXPERIMENT.format(draft=draft))
    job = _run(venv, outside, "python", "-m", "jobs.capacity", "--config", "exp.toml", "--results", "results")
    assert "complete" in job.stdout and "dflash2 vs mtp" in job.stdout, job.stdout[-3000:]
    every = json.loads(_run(venv, outside, "python", "-c", EVERY_QUERY, *names).stdout)
    assert set(every) == set(names)
    for name, (code, out) in every.items():
        assert code == 0 and isinstance(json.loads(out), list), (name, code, out[-3000:])
    compare = json.loads(every["compare_algorithms"][1])
    assert {r["target"] for r in compare} == {"dflash2"} and {r["concurrency"] for r in compare} == {1, 2}
    _run(venv, outside, "loadgen", "report", "--results", "results", "-o", "report.html")
    assert "dflash2" in (outside / "report.html").read_text()


def test_a_fleet_file_names_shipped_profiles(venv, outside):
    (outside / "fleet.toml").write_text(FLEET)
    (outside / "exp.toml").write_text(FLEET_EXPERIMENT)
    stages = json.loads(_run(venv, outside, "python", "-c", SHOW_FLEET, "exp.toml").stdout)
    package = _site(venv, outside)
    assert [name for name, _, _ in stages] == ["mtp", "dflash2-b4"]
    for name, path, flags in stages:
        assert Path(path) == package / "config" / "profiles" / f"{name}.toml"
        assert flags["model-path"]                        # from `none`, the profile both extend
    assert stages[0][2]["speculative-algorithm"] == "NEXTN" and stages[1][2]["speculative-num-draft-tokens"] == 4


def test_ray_job_submit_installs_loadgen_from_the_wheel(venv, outside, monkeypatch):
    """`ray job submit` with the wheel in the runtime env's `pip` and no --working-dir (docs/fleets.md), on a
    cluster whose Python has loadgen's dependencies but not loadgen: the driver and every actor import it from
    the wheel the runtime env installed, with its SQL for the answer. Last in this module: it uninstalls loadgen
    from the shared venv."""
    [wheel] = (venv.parents[1] / "dist").glob("loadgen-*.whl")
    _run(venv, outside, "pip", "uninstall", "-q", "-y", "loadgen")
    bare = subprocess.run([str(venv / "python"), "-c", "import loadgen"], cwd=outside, capture_output=True, text=True)
    assert "No module named 'loadgen'" in bare.stderr
    (outside / "exp.toml").write_text(EXPERIMENT.split('[[targets]]\nname = "dflash2"')[0])
    monkeypatch.setenv("PATH", f"{venv}{os.pathsep}{os.environ['PATH']}")   # the cluster runs the venv's Ray
    monkeypatch.chdir(outside)
    ray_dir = tempfile.mkdtemp(prefix="lgw-", dir="/tmp")  # short: Ray's socket paths must fit in 107 bytes
    with ray_head(ray_dir) as address:
        job = submit_job(address, ["python", "-m", "jobs.capacity", "--config", str(outside / "exp.toml"),
                                   "--results", str(outside / "results")], timeout_s=420, working_dir=None,
                         options=("--runtime-env-json", json.dumps({"pip": [str(wheel)]})))
    assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-3000:]
    assert "succeeded" in job.stdout and "answer:" in job.stdout, job.stdout[-3000:]
