"""Secrets of launched servers: named in the experiment (env or file), never written there; handed to the server
off its command line; masked in everything loadgen writes (config, command line, captured server log)."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import psutil
import pytest
import ray

from loadgen.servers.process import ServerProcess

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
