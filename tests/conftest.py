"""Shared fixtures: one local Ray per test session, emulators on loopback."""

from __future__ import annotations

import functools
import os
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest
from aiohttp import web_runner

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


def _session_ray_token() -> None:
    """Every Ray the tests start uses token auth, Ray's own default for a local cluster, with a token of this
    session's (a 0600 file in a 0700 folder, removed at exit) instead of the shared ~/.ray/auth_token.
    RAY_AUTH_MODE=token is what ray.init sets for the local cluster anyway; set up front, the `ray start`,
    `ray job submit/logs/stop` subprocesses use it too (a `ray job` client sends the token only in token mode)."""
    import atexit
    import secrets
    import shutil
    import tempfile
    if os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH"):
        return
    folder = tempfile.mkdtemp(prefix="loadgen-ray-auth-")
    atexit.register(shutil.rmtree, folder, True)
    path = os.path.join(folder, "token")
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
        f.write(secrets.token_hex(32))
    os.environ["RAY_AUTH_TOKEN_PATH"] = path
    os.environ.setdefault("RAY_AUTH_MODE", "token")


_session_ray_token()

from loadgen import clock  # noqa: E402,F401  (first: every Ray and server started here inherits its anchor)
from loadgen.emulator.launch import EmulatorProcess  # noqa: E402
from loadgen.servers.ports import free_port  # noqa: E402


def sigint_default() -> None:
    """In a child before exec: SIGINT at its default, as an interactive shell starts a command. A CI started in
    the background of a script runs with SIGINT ignored, and a child inherits that: a `ray start` then gave every
    job driver of its cluster an ignored SIGINT, and the fleet's SIGINT tests waited for a driver that never
    stopped."""
    import signal
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def wait_until(condition: Callable[[], object], timeout_s: float = 60.0, what: str = "the condition") -> None:
    """Poll `condition` until it holds: a test waits for the state it needs (a request running, one queued, a
    line logged), never for a time that it hopes is long enough on a busy machine."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout_s:g} s"
        time.sleep(0.02)


@pytest.fixture(autouse=True)
def no_stop_carried_over() -> Iterator[None]:
    """Each test starts with no stop handlers of an earlier one's and no stop noted: the entry points that tests
    call in this process install the handlers for the whole process (a job's process runs one job), and a
    SIGTERM one test sent itself stopped every run after it."""
    from loadgen.driver import stop
    yield
    stop.uninstall()


UNIT = Path(__file__).parent / "unit"
TESTS = Path(__file__).parent
# The order xdist hands files to its workers (`--dist loadfile --no-loadscope-reorder` in pyproject.toml): the
# tiers' longest files first, then the rest of e2e, integration and unit (short files last, so that the workers end
# together). xdist's default order, by number of tests, put minutes-long files of one or two tests (e2e, Chromium)
# last, and a long file started last keeps one worker busy while the others idle. A stale list costs balance, never
# a verdict; the numbers are in the commit that measured them (pytest --durations).
LONGEST_FIRST = ("e2e/test_fleet_cluster.py", "integration/test_capacity_search.py", "integration/test_plan.py",
                 "e2e/test_resume.py", "integration/test_vllm_server.py", "e2e/test_wheel.py",
                 "integration/test_server_death.py", "e2e/test_twin.py", "e2e/test_fleet_node_lost.py",
                 "integration/test_report_chromium.py", "integration/test_drift.py",
                 "integration/test_process_faults.py", "integration/test_llamacpp_server.py",
                 "e2e/test_stop_signals.py", "integration/test_faults.py", "unit/test_report.py",
                 "unit/test_plan_units.py")
TIERS = ("e2e", "integration", "unit")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files in LONGEST_FIRST's order, then the others by tier, each file's tests in their own order."""
    def rank(item: pytest.Item) -> tuple[int, int]:
        try:
            rel = item.path.relative_to(TESTS).as_posix()
        except ValueError:
            return len(LONGEST_FIRST) + len(TIERS), 0
        if rel in LONGEST_FIRST:
            return LONGEST_FIRST.index(rel), 0
        tier = rel.split("/")[0]
        return len(LONGEST_FIRST) + (TIERS.index(tier) if tier in TIERS else len(TIERS)), 0
    items.sort(key=rank)   # stable: files keep their collection order within a rank, tests theirs
_in_unit_test = False


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Notes whether a tests/unit/ test runs, its fixtures of every scope included."""
    global _in_unit_test
    _in_unit_test = UNIT in item.path.parents
    yield
    _in_unit_test = False


def _unit_refuses(what: str, original: Callable) -> Callable:
    """tests/unit/ is the fast tier: no subprocess (so no Ray, no emulator process) and no server, in-process or not
    (a listening socket, an aiohttp site on any loop). A unit test that starts one fails, naming what it started:
    it belongs in tests/integration/ or tests/e2e/ (tests/README.md)."""
    @functools.wraps(original)
    def guarded(*args: object, **kwargs: object) -> object:
        if _in_unit_test:
            raise AssertionError(f"a unit test started {what}: move it to tests/integration/ or tests/e2e/")
        return original(*args, **kwargs)
    return guarded


subprocess.Popen.__init__ = _unit_refuses("a subprocess", subprocess.Popen.__init__)
socket.socket.listen = _unit_refuses("a server (a listening socket)", socket.socket.listen)
web_runner.BaseSite.start = _unit_refuses("a server (an aiohttp site)", web_runner.BaseSite.start)


def start_local_ray() -> None:
    """A real local Ray (stopped by ray.shutdown: only this cluster). Ray gives its raylet a fixed 30 s to
    register; a machine shared by many can need more: then it starts once more."""
    import ray
    for attempt in (1, 2, 3):
        try:
            ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
            return
        except Exception as exc:
            ray.shutdown()
            if attempt == 3 or "timed out during startup" not in str(exc):
                raise


@pytest.fixture(scope="session")
def ray_local() -> Iterator[None]:
    """A real local Ray, started once per session."""
    import ray
    start_local_ray()
    yield
    ray.shutdown()


@contextmanager
def emulator(*flags: str, timeout_s: float = 30.0) -> Iterator[str]:
    """Run `python -m loadgen.emulator FLAGS` on a free loopback port; yields its URL."""
    with EmulatorProcess(list(flags), startup_timeout=timeout_s) as emu:
        yield emu.url


@contextmanager
def serve_app(app) -> Iterator[str]:
    """A real aiohttp server for `app` on a free loopback port, on its own loop in a thread; yields its URL."""
    import asyncio
    import threading

    from aiohttp import web
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app)
    port = free_port()
    loop.run_until_complete(runner.setup())
    loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


@pytest.fixture(scope="session")
def emulator_factory():
    return emulator


REPO = Path(__file__).parents[1]


@contextmanager
def ray_head(tmp_dir: str, *head_args: str, workers: Sequence[Sequence[str]] = ()) -> Iterator[str]:
    """`ray start --head` on loopback in its own temp dir (plus one more raylet per `workers` entry, each
    with those `ray start` args: a multi-node cluster on one machine); yields the job-submission address.
    Stopped by killing exactly this cluster's processes (found by its temp dir and GCS port), never by
    `ray stop`."""
    gcs_port, dashboard_port = free_port(), free_port()

    def ports(*names: str) -> list[str]:
        # Every port explicit: another Ray on this machine (the session's, a colleague's) holds the defaults.
        return [f"--{name}={free_port()}" for name in (
            "dashboard-agent-listen-port", "dashboard-agent-grpc-port", "runtime-env-agent-port",
            "metrics-export-port", "node-manager-port", "object-manager-port", *names)]
    # The single-machine guard (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, set above) refuses extra raylets.
    env = dict(os.environ, RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="1") if workers else None
    subprocess.run(["ray", "start", "--head", f"--port={gcs_port}", f"--dashboard-port={dashboard_port}",
                    "--dashboard-host=127.0.0.1", "--node-ip-address=127.0.0.1", "--num-cpus=2",
                    *ports("ray-client-server-port"), *head_args,
                    f"--temp-dir={tmp_dir}", "--include-dashboard=true", "--disable-usage-stats"],
                   check=True, capture_output=True, timeout=120, env=env, preexec_fn=sigint_default)
    try:
        for args in workers:
            _start_raylet(gcs_port, [*ports(), *args], env)
        yield f"http://127.0.0.1:{dashboard_port}"
    finally:
        _kill_matching(lambda arg: tmp_dir in arg or f":{gcs_port}" in arg)


def _start_raylet(gcs_port: int, args: list[str], env: dict | None) -> None:
    """`ray start` of one more raylet. Ray gives a raylet a fixed 30 s to register with the GCS, which a loaded
    machine can miss: that attempt's processes (found by its node-manager port) are killed and it starts again."""
    for attempt in (1, 2, 3):
        port = next(a for a in args if a.startswith("--node-manager-port=")).split("=", 1)[1]
        try:
            subprocess.run(["ray", "start", f"--address=127.0.0.1:{gcs_port}", "--node-ip-address=127.0.0.1",
                            *args, "--disable-usage-stats"], check=True, capture_output=True, timeout=120,
                           env=env, preexec_fn=sigint_default)
            return
        except subprocess.CalledProcessError as exc:
            if attempt == 3 or b"timed out during startup" not in exc.stderr:
                raise
            _kill_matching(functools.partial(_is_node_manager_port, port))
            args = [a if not a.startswith("--node-manager-port=") else f"--node-manager-port={free_port()}"
                    for a in args]


def _is_node_manager_port(port: str, arg: str) -> bool:
    """`--node-manager-port=P` (ray start) or `--node_manager_port=P` (the raylet it started)."""
    return arg.replace("_", "-") == f"--node-manager-port={port}"


def _kill_matching(matches: Callable[[str], bool]) -> None:
    """Kill the processes one of whose arguments `matches`, and their children."""
    import psutil
    roots = [p for p in psutil.process_iter(["cmdline"]) if any(matches(a) for a in (p.info["cmdline"] or []))]
    victims = set(roots)
    for root in roots:
        try:
            victims.update(root.children(recursive=True))
        except psutil.NoSuchProcess:
            pass
    for proc in victims:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(list(victims), timeout=10)


def submit_job(address: str, entrypoint: list[str], timeout_s: float = 240, options: tuple[str, ...] = (),
               working_dir: Path | None = REPO) -> subprocess.CompletedProcess:
    """`ray job submit --working-dir <repo> [options]` (no --working-dir where `working_dir` is None); retried only
    while the new head's job agent is not up yet."""
    deadline = time.monotonic() + 60
    upload = ("--working-dir", str(working_dir)) if working_dir else ()
    while True:
        job = subprocess.run(["ray", "job", "submit", "--address", address, *upload, *options,
                              "--", *entrypoint], capture_output=True, text=True, timeout=timeout_s)
        if "No available agent to submit job" not in job.stderr or time.monotonic() > deadline:
            return job
        time.sleep(1)


@pytest.fixture(scope="session")
def llama_server_bin() -> tuple[str, str]:
    """(llama-server binary, GGUF model): built or reused from the cache by .ci/build-llama-server.sh
    (tests/llamaserver.py); the test skips, naming the reason, only when the build is impossible here."""
    from llamaserver import llama_server_paths
    paths = llama_server_paths()
    if isinstance(paths, str):
        pytest.skip(paths)
    return paths


def chain_draft_profile(name: str, **accept_p: float) -> str:
    """An emulator algorithm profile (TOML): a chain draft of 3 steps, 4 draft tokens, 0.9 ms a draft forward, and
    `accept_p` per prompt kind (prose and code 0.3 unless given)."""
    accept = {"prose": 0.3, "code": 0.3, **accept_p}
    return (f'name = "{name}"\ndraft = "chain"\ndefault_num_steps = 3\ndefault_eagle_topk = 1\n'
            "default_num_draft_tokens = 4\ndraft_forward_ms = 0.9\n[accept_p]\n"
            + "".join(f"{kind} = {p}\n" for kind, p in accept.items()))


MTP_EMULATOR = """[targets.emulator]
model-path = "m"
speculative-algorithm = "NEXTN"
speculative-num-steps = 3
speculative-eagle-topk = 1
speculative-num-draft-tokens = 4
"""


def small_job_toml(name: str, levels: str, max_new_tokens: int = 16, measure_s: float = 2.0, extra: str = "") -> str:
    """A short experiment file on one emulated MTP target (`mtp`) for the jobs the e2e tests submit; `extra` is TOML
    appended after it (more emulator flags, an [slo], another target)."""
    return (f'[run]\nname = "{name}"\n[load]\nconcurrency = [{levels}]\nwarmup_s = 0.5\nmeasure_s = {measure_s}\n'
            f'[prompts]\nmax_new_tokens = {max_new_tokens}\nignore_eos = true\n[[targets]]\nname = "mtp"\n'
            f"{MTP_EMULATOR}{extra}")


def fleet_toml(name: str, mark: str, nodes: dict[str, tuple[str, str]], replace: str = "") -> str:
    """A fleet file of emulated nodes for a cluster started by `ray_head`: node name -> (how Ray finds it, e.g.
    'resource = "spark1"', and its extra emulator flags, e.g. 'seed = 1, time-scale = 4.0'). `mark` goes into
    every server's --model-path, so a test finds its own server processes."""
    text = (f'[fleet]\nname = "{name}"\nlaunch = "emulator"\nhealth_timeout_s = 60\n'
            f'[fleet.replace]\nmodel-path = "{mark}"\n{replace}')
    for node, (locator, flags) in nodes.items():
        text += f'[[fleet.nodes]]\nname = "{node}"\n{locator}\nflags = {{ {flags} }}\n'
    return text
