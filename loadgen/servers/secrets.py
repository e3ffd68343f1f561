"""Secrets of the servers loadgen launches: where they come from, how they reach the server, and masking.

A launch flag whose name ends in key, token, secret or password (`api-key`, `admin-api-key`, `hf-token`,
`watermark-key`, ...) is a secret. The experiment or profile names where it is, never the value:
    api-key = { env = "SGLANG_API_KEY" }       # an environment variable on the server's node
    api-key = { file = "/etc/loadgen/key" }    # a file on the server's node
A literal value is refused. In the launch args the flag carries the reference (`env:NAME` / `file:PATH`); the
server's actor resolves it on its node and hands the value over without a command line: the emulator reads
LOADGEN_EMULATOR_<FLAG> from its environment, SGLang reads a 0600 `--config` YAML file removed once it is up.
Whatever loadgen writes (runs.config, the recorded command line, the captured server log) goes through `mask`.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from loadgen.errors import ConfigError, LoadgenError

MASK = "***"
_SECRET_NAME = re.compile(r"(^|[-_])(key|token|secret|password|passwd)$", re.IGNORECASE)
_MIN_MASKED = 6   # shorter values (a "1", a "true") would mask half the log and protect nothing


def is_secret_name(name: str) -> bool:
    """A flag, config key or environment variable whose value is a secret (api-key, HF_TOKEN, admin_api_key)."""
    return bool(_SECRET_NAME.search(name))


def flag_ref(value: Any, key: str, base_dir: Path) -> str:
    """The launch-arg form of a secret flag's config value: `env:NAME` or `file:/abs/path`. A literal is refused
    with one line naming the fix (and never the value)."""
    if isinstance(value, dict) and len(value) == 1:
        (kind, where), = value.items()
        if kind in ("env", "file") and isinstance(where, str) and where:
            return f"env:{where}" if kind == "env" else f"file:{(base_dir / where).resolve()}"
    flag = key.rsplit(".", 1)[-1]
    raise ConfigError(key, "is a secret: its value is never written in an experiment or profile",
                      f'{flag} = {{ env = "VAR" }} (an environment variable where the server runs) '
                      f'or {{ file = "path" }} (a file readable only by you)')


def split_args(args: Iterable[str]) -> tuple[list[str], dict[str, str]]:
    """Launch args without the secret flags, and {flag: reference} of those (`--api-key`: `env:NAME`)."""
    plain: list[str] = []
    refs: dict[str, str] = {}
    items = list(args)
    i = 0
    while i < len(items):
        arg = items[i]
        if arg.startswith("--") and is_secret_name(arg[2:]) and i + 1 < len(items):
            refs[arg[2:]] = items[i + 1]
            i += 2
            continue
        plain.append(arg)
        i += 1
    return plain, refs


def resolve(flag: str, ref: str) -> str:
    """The value of a secret reference, read here (the server's node)."""
    kind, _, where = ref.partition(":")
    if kind == "env":
        value = os.environ.get(where, "")
        if not value:
            raise LoadgenError(f"--{flag}: environment variable {where} is not set on this node "
                               f"(fix: set it where the server runs, e.g. before `ray start`)")
        return value
    if kind == "file":
        try:
            value = Path(where).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise LoadgenError(f"--{flag}: cannot read {where} on this node ({exc.strerror or exc}) "
                               "(fix: put the file there, readable by the user Ray runs as)") from None
        if not value:
            raise LoadgenError(f"--{flag}: {where} is empty (fix: write the secret into it)")
        return value
    raise LoadgenError(f"--{flag}: a secret is given as env:NAME or file:PATH "
                       f'(fix: {flag} = {{ env = "VAR" }} in the experiment or profile)')


def emulator_env(flag: str) -> str:
    """The environment variable loadgen's emulator reads a secret flag from (api-key: LOADGEN_EMULATOR_API_KEY)."""
    return "LOADGEN_EMULATOR_" + flag.upper().replace("-", "_")


def sglang_config_file(values: Mapping[str, str]) -> str:
    """A `--config` YAML for sglang.launch_server holding only the secret flags, in a fresh 0700 folder, the
    file 0600 (JSON strings are YAML). The caller removes it once the server has read it."""
    folder = tempfile.mkdtemp(prefix="loadgen-secrets-")
    path = os.path.join(folder, "secrets.yaml")
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
        for flag, value in values.items():
            f.write(f"{flag}: {json.dumps(value)}\n")
    return path


def env_values(environ: Mapping[str, str]) -> list[str]:
    """Values of secret-named environment variables (HF_TOKEN, SGLANG_API_KEY, RAY_AUTH_TOKEN, ...)."""
    return [v for k, v in environ.items() if is_secret_name(k) and len(v) >= _MIN_MASKED]


def mask(text: str, values: Iterable[str]) -> str:
    """`text` with every occurrence of each secret value replaced by ***."""
    for value in sorted({v for v in values if v and len(v) >= _MIN_MASKED}, key=len, reverse=True):
        text = text.replace(value, MASK)
    return text


def masked(obj: Any) -> Any:
    """A config tree (runs.config) with the literal value of every secret-named key replaced by ***; references
    ({ env = ... }, { file = ... }, api_key_env) are kept, they say where the secret is, not what it is."""
    if isinstance(obj, dict):
        return {k: MASK if isinstance(k, str) and is_secret_name(k) and isinstance(v, (str, int, float))
                and not isinstance(v, bool) else masked(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [masked(v) for v in obj]
    return obj


_FLAG_VALUE = re.compile(r"(--[A-Za-z0-9-]*(?:key|token|secret|password|passwd)(?:=|\s+|',\s*'))([^\s',\]]+)",
                         re.IGNORECASE)


def masked_server_info(info: Mapping[str, Any]) -> dict:
    """A server's /server_info with secret fields (SGLang: api_key, admin_api_key) and the secret flags of its
    launch_command replaced by ***: SGLang reports its resolved arguments there."""
    out = masked(dict(info))
    for k, v in out.items():
        if isinstance(v, str) and "--" in v:
            out[k] = _FLAG_VALUE.sub(lambda m: m.group(1) + MASK, v)
    return out
