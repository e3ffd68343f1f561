"""Secrets of launched servers: named in the experiment (env or file), never written there; handed to the server
off its command line; masked in everything loadgen writes (config, command line, captured server log)."""

from __future__ import annotations

import json
import os
import threading

import pytest

from loadgen.config import parse_experiment
from loadgen.errors import ConfigError
from loadgen.servers import secrets
from loadgen.servers.process import _copy_masked

SERVER_KEY = "sk-launched-4c1d9e7f2a8b"


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
