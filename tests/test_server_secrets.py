"""Secrets of launched servers: named in the experiment (env or file), never written there; handed to the server
off its command line; masked in everything loadgen writes (config, command line, captured server log)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import threading
from pathlib import Path

import psutil
import pytest
import ray

from loadgen.config import parse_experiment
from loadgen.errors import ConfigError
from loadgen.servers import secrets
from loadgen.servers.process import ServerProcess, _copy_masked

SERVER_KEY = "sk-launched-4c1d9e7f2a8b"

# A stand-in for sglang.launch_server: reads --config YAML as SGLang does, prints its arguments the way SGLang
# logs ServerArgs (key included), and answers /health.
FAKE_SGLANG = r'''
import hashlib, http.server, os, stat, sys, yaml
argv = sys.argv[1:]
args = {}
if "--config" in argv:
    i = argv.index("--config"); path = argv[i + 1]
    print(f"config mode {oct(stat.S_IMODE(os.stat(path).st_mode))} dir mode "
          f"{oct(stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode))}", flush=True)
    args.update(yaml.safe_load(open(path)))
    del argv[i:i + 2]
for i, a in enumerate(argv):
    if a.startswith("--"):
        args[a[2:]] = argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("--") else True
key = args.get("api-key")
print(f"server_args=ServerArgs(api_key={key!r}, admin_api_key={args.get('admin-api-key')!r}, "
      f"host={args['host']!r})", flush=True)
print("key sha256 " + hashlib.sha256(str(key).encode()).hexdigest(), flush=True)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *a): pass
http.server.HTTPServer((args["host"], int(args["port"])), H).serve_forever()
'''


@pytest.mark.parametrize("flag", ["api-key", "admin-api-key", "hf-token"])
def test_a_literal_secret_in_the_experiment_is_refused_with_the_fix(flag, tmp_path):
    with pytest.raises(ConfigError) as exc:
        parse_experiment({"load": {"concurrency": [1]},
                          "targets": [{"name": "emu", "emulator": {flag: SERVER_KEY}}]}, tmp_path)
    message = str(exc.value)
    assert exc.value.key == f"targets[0].emulator.{flag}" and "env =" in exc.value.fix and "file =" in exc.value.fix
    assert SERVER_KEY not in message and "\n" not in message


def test_a_literal_secret_in_a_launch_profile_is_refused(tmp_path):
    (tmp_path / "p.toml").write_text(f'[flags]\nmodel-path = "/m"\napi-key = "{SERVER_KEY}"\n')
    (tmp_path / "fleet.toml").write_text('[fleet]\nlaunch = "emulator"\nprofiles_dir = "."\n'
                                         '[[fleet.nodes]]\nname = "n1"\nresource = "n1"\n')
    with pytest.raises(ConfigError) as exc:
        parse_experiment({"load": {"concurrency": [1]},
                          "fleet": {"file": "fleet.toml", "profiles": ["p"]}}, tmp_path)
    assert exc.value.key.endswith(".api-key") and SERVER_KEY not in str(exc.value)


def test_references_become_launch_args_and_config_keeps_only_the_reference(tmp_path):
    exp = parse_experiment({"load": {"concurrency": [1]},
                            "targets": [{"name": "emu", "emulator": {"api-key": {"env": "EMU_KEY"}}},
                                        {"name": "f", "emulator": {"api-key": {"file": "k"}}}]}, tmp_path)
    assert exp.targets[0].emulator_args[:2] == ("--api-key", "env:EMU_KEY")
    assert exp.targets[1].emulator_args[:2] == ("--api-key", f"file:{tmp_path / 'k'}")
    leaked = {"targets": [{"emulator": {"api-key": SERVER_KEY, "admin_api_key": "x" * 8, "api-key-ref": 1}}]}
    assert SERVER_KEY not in json.dumps(secrets.masked(leaked))
    assert secrets.masked(exp.raw) == exp.raw   # references are kept: they say where, not what


def test_server_info_of_sglang_is_masked():
    info = {"api_key": SERVER_KEY, "admin_api_key": None, "model_path": "/m", "max_total_tokens": 5,
            "launch_command": f"python -m sglang.launch_server --api-key {SERVER_KEY} --admin-api-key={SERVER_KEY}x"}
    out = secrets.masked_server_info(info)
    assert SERVER_KEY not in json.dumps(out) and out["model_path"] == "/m" and out["max_total_tokens"] == 5
    assert out["launch_command"].startswith("python -m sglang.launch_server --api-key ***")


def test_captured_output_is_masked_line_by_line(tmp_path):
    """The pump between the server's pipe and its log file: a real pipe, a real file."""
    read, write = os.pipe()
    log = open(tmp_path / "s.log", "ab")
    pump = threading.Thread(target=_copy_masked, args=(os.fdopen(read, "rb"), log, [SERVER_KEY]))
    pump.start()
    with os.fdopen(write, "wb") as w:
        w.write(f"ServerArgs(api_key='{SERVER_KEY}')\nplain line\n{SERVER_KEY}{SERVER_KEY}".encode())
    pump.join(5)
    text = (tmp_path / "s.log").read_text()
    assert SERVER_KEY not in text and "api_key='***'" in text and "plain line" in text


def test_a_launched_sglang_gets_its_key_from_an_owner_only_file_never_the_command_line(ray_local, tmp_path):
    """start_server for a non-emulator module (SGLang's path): the key is read on the node (from a file here),
    written to a 0600 --config YAML in a 0700 folder that is gone once the server is up; the server got it
    (its hash), the process list never shows it, and the log has SGLang's printed arguments masked."""
    (tmp_path / "fake_sglang.py").write_text(FAKE_SGLANG)
    key_file = tmp_path / "server.key"
    key_file.write_text(SERVER_KEY + "\n")
    key_file.chmod(0o600)
    server = ServerProcess.options(runtime_env={"env_vars": {"PYTHONPATH": str(tmp_path)}}).remote(
        "fake", str(tmp_path / "logs"))
    try:
        url = ray.get(server.start_server.remote("fake_sglang", ["--model-path", "/m", "--api-key",
                                                                 f"file:{key_file}"], "127.0.0.1", 0, 30))
        pid = ray.get(server.pid.remote())
        command = psutil.Process(pid).cmdline()
        every_args = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
        ray.get(server.stop.remote())
        name, data = ray.get(server.read_log.remote())
    finally:
        ray.kill(server)
    log = data.decode()
    assert url.startswith("http://127.0.0.1:") and "--config" in command
    assert not Path(command[command.index("--config") + 1]).exists()        # removed once the server was up
    assert "config mode 0o600 dir mode 0o700" in log
    assert f"key sha256 {hashlib.sha256(SERVER_KEY.encode()).hexdigest()}" in log   # the server got the key
    assert "api_key='***'" in log and SERVER_KEY not in log and SERVER_KEY not in every_args
    assert log.startswith("$ ") and str(key_file) not in " ".join(command)


def test_a_missing_secret_stops_the_launch_with_one_line(ray_local, tmp_path):
    server = ServerProcess.remote("emu", str(tmp_path / "logs"))
    try:
        with pytest.raises(Exception) as exc:
            ray.get(server.start_emulator.remote(["--model-path", "m", "--api-key", "env:LOADGEN_TEST_UNSET_KEY"]))
    finally:
        ray.kill(server)
    assert "LOADGEN_TEST_UNSET_KEY is not set on this node (fix:" in str(exc.value)


def test_sglang_server_info_is_masked_where_it_is_read():
    """Real SGLang reports its api_key and launch command in /get_server_info, which goes into steps.server_info:
    the probe masks it as it reads it."""
    import asyncio

    import aiohttp
    from aiohttp import web

    from conftest import serve_app
    from loadgen.servers import probe

    key = "sk-probe-" + "9" * 20

    async def info(request: web.Request) -> web.Response:
        return web.json_response({"version": "0.5.23", "api_key": key,
                                  "launch_command": f"python -m sglang.launch_server --api-key {key} --port 1"})

    app = web.Application()
    app.router.add_get("/get_server_info", info)

    async def read(url: str) -> dict:
        async with aiohttp.ClientSession() as session:
            return await probe.sglang_server_info(session, url)

    with serve_app(app) as url:
        got = asyncio.run(read(url))
    assert got["version"] == "0.5.23" and key not in str(got)
