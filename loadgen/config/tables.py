"""What every config file reader shares: loading a TOML file, safe names, and the strict table reader
(loadgen.keys.StrictTable: declared keys with defaults and checks, unknown keys are errors with a did-you-mean,
every error names the dotted key, what is wrong and the fix)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from loadgen.errors import ConfigError
from loadgen.keys import StrictTable

__all__ = ["NAME_PATTERN", "StrictTable", "check_name", "load_toml"]

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def load_toml(path: Path, key: str, missing_fix: str = "check the path") -> dict[str, Any]:
    """A TOML file's data; a missing or unparsable file is a ConfigError on `key`."""
    if not path.is_file():
        raise ConfigError(key, f"file not found: {path}", missing_fix)
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(key, f"{path} is not valid TOML: {exc}") from exc


def check_name(name: Any, key: str, why: str = "") -> str:
    """A name that becomes part of paths, target names and SQL: letters, digits, '.', '_' or '-'."""
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise ConfigError(key, f"{name!r} is not a safe name", "use letters, digits, '.', '_' or '-'" + why)
    return name
