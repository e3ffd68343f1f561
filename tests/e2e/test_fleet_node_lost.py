"""A fleet node removed mid-run: a two-node Ray cluster on one machine (`ray start`, each node with its own
custom resource), emulated Sparks launched by the fleet job; the second node's raylet and everything under it is
killed while the first step runs. Its target is recorded as lost (its step row failed, a server_death sample),
dropped from the rest of the run, and the other node's answers are complete."""

from __future__ import annotations

import json
import tempfile
import threading
import time
import urllib.request
import uuid

import duckdb
import psutil
import pytest

from conftest import fleet_toml, ray_head, submit_job

MARK = f"lost-node-{uuid.uuid4().hex[:8]}"

FLEET = fleet_toml("two-sparks", MARK, {"spark1": ('resource = "spark1"', "seed = 1, time-scale = 1.0"),
                                         "spark2": ('resource = "spark2"', "seed = 2, time-scale = 1.0")})

EXPERIMENT = """
[run]
name = "lostnode"
[load]
concurrency = [2, 4]
requests = 8
stall_timeout_s = 5
[prompts]
max_new_tokens = 64
ignore_eos = true
[fleet]
file = "fleet.toml"
[[fleet.configurations]]
profile = "mtp"
"""


def _emulator_port(seed: str) -> int | None:
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or []
        if any(MARK in a for a in cmd) and "--seed" in cmd and cmd[cmd.index("--seed") + 1] == seed:
            return int(cmd[cmd.index("--port") + 1])
    return None


def _busy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/emulator/requests", timeout=5) as resp:
            return bool(json.load(resp)["requests"])
    except OSError:
        return False


def _remove_node(ray_dir: str, resource: str, killed: list[int]) -> None:
    """Kill this cluster's raylet (found by its temp dir) that holds `resource`, and every process under it (its
    workers, the server's actor); another test's cluster on this machine may have a node of the same name."""
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        port = _emulator_port("2")
        if port and _busy(port):
            break
        time.sleep(0.2)
    time.sleep(1.0)
    for p in psutil.process_iter(["cmdline"]):
        args = p.info["cmdline"] or []
        cmd = " ".join(args)
        if "raylet" in cmd and resource in cmd and f"--temp_dir={ray_dir}" in args:
            victims = [p, *p.children(recursive=True)]
            for v in victims:
                try:
                    v.kill()
                    killed.append(v.pid)
                except psutil.NoSuchProcess:
                    pass


@pytest.mark.timeout(600)
def test_node_removed_mid_run(tmp_path):
    ray_dir = tempfile.mkdtemp(prefix="lgl-", dir="/tmp")
    (tmp_path / "fleet.toml").write_text(FLEET)
    config = tmp_path / "exp.toml"
    config.write_text(EXPERIMENT)
    results = tmp_path / "results"
    head = ['--resources={"spark1": 1}', "--object-store-memory=100000000"]
    workers = [["--num-cpus=1", '--resources={"spark2": 1}', "--object-store-memory=100000000"]]
    killed: list[int] = []
    with ray_head(ray_dir, *head, workers=workers) as address:
        remover = threading.Thread(target=_remove_node, args=(ray_dir, "spark2", killed), daemon=True)
        remover.start()
        job = submit_job(address, ["python3", "-m", "jobs.fleet", "--config", str(config), "--results", str(results)],
                         timeout_s=480)
        remover.join(5)
    out = job.stdout[-4000:] + job.stderr[-3000:]
    assert killed, out
    con = duckdb.connect()
    glob = f"{results}/%s/*/*.parquet"
    steps = con.sql(f"SELECT step_id, target, status, status_reason FROM read_parquet('{glob % 'steps'}') "
                    "ORDER BY step_id, target").fetchall()
    by = {(s[0], s[1].split(".")[0]): s for s in steps}
    assert by[(0, "spark2")][2] == "failed" and "lost" in by[(0, "spark2")][3], steps
    assert [k for k in by if k[1] == "spark2"] == [(0, "spark2")], steps          # dropped after the loss
    assert by[(0, "spark1")][2] == by[(1, "spark1")][2] == "complete", steps        # the other node went on
    ok = con.sql(f"SELECT step_id, count(*) FILTER (status = 'ok'), count(*) FROM read_parquet('{glob % 'requests'}') "
                 "WHERE target LIKE 'spark1%' GROUP BY 1 ORDER BY 1").fetchall()
    assert ok == [(0, 8, 8), (1, 8, 8)], ok                                         # its answers complete
    [(cause,)] = con.sql("SELECT json_extract_string(labels, '$.cause') FROM "
                         f"read_parquet('{glob % 'server_samples'}') WHERE name = 'server_death'").fetchall()
    assert cause == "lost"
    assert any("spark2" in line and "dropped from the rest of the run" in line and "incomplete" in line
               for line in job.stdout.replace("\n    ", " ").splitlines()), out   # the run's line (wrapped) names it
