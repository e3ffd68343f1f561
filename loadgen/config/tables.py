"""The strict TOML table reader every config file goes through: typed keys with defaults, unknown keys are
errors (with a did-you-mean), and every error names the dotted key, what is wrong and the fix."""

from __future__ import annotations

import difflib
import math
import re
import tomllib
from pathlib import Path
from typing import Any

from loadgen.errors import ConfigError

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_TYPE_NAMES = {dict: "a table", list: "a list", str: "a string", int: "a whole number", float: "a number",
               bool: "true or false"}


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


class StrictTable:
    """Reads one TOML table, remembering which keys were used so leftovers can be reported."""

    def __init__(self, data: Any, key: str) -> None:
        if not isinstance(data, dict):
            raise ConfigError(key, f"must be a table, got {type(data).__name__}", f"write it as [{key}]")
        self.data, self.key = data, key
        self.used: set[str] = set()

    def _key(self, name: str) -> str:
        return f"{self.key}.{name}" if self.key else name

    def get(self, name: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
        key = self._key(name)
        self.used.add(name)
        if name not in self.data:
            if default is ...:
                where = f"[{self.key}]" if self.key else "the file"
                close = difflib.get_close_matches(name, set(self.data) - self.used, n=1)
                fix = f"did you mean `{name}` for `{close[0]}`?" if close else f"add `{name} = ...` to {where}"
                raise ConfigError(key, "is required", fix)
            return default
        value = self.data[name]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if float in kinds and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            names = " or ".join(_TYPE_NAMES.get(k, k.__name__) for k in kinds)
            scalar = isinstance(value, (bool, int, float, str))
            fix = f"write `{name} = [{_toml(value)}]`" if list in kinds and scalar else ""
            if float in kinds and not fix:
                fix = (f"write the number without quotes: `{name} = {value}`" if _number(value) is not None
                       else f"write a number: `{name} = <number>`")
            raise ConfigError(key, f"must be {names}, got {type(value).__name__} {value!r}", fix)
        return value

    def positive(self, name: str, default: float, allow_zero: bool = False) -> float:
        value = self.get(name, float, default)
        if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
            bound = ">= 0" if allow_zero else "> 0"
            raise ConfigError(self._key(name), f"must be a finite number {bound}, got {value!r}",
                              f"give `{name}` a number {bound}")
        return value

    def done(self) -> None:
        unknown = sorted(set(self.data) - self.used)
        if unknown:
            close = difflib.get_close_matches(unknown[0], self.used, n=1)
            known = ", ".join(sorted(self.used))
            fix = f"did you mean `{close[0]}`? (known keys here: {known})" if close else f"known keys here: {known}"
            raise ConfigError(self._key(unknown[0]), "unknown key", fix)


def _number(value: Any) -> float | None:
    """A number written as text (`"2.10"`), else None."""
    try:
        return float(value) if isinstance(value, str) else None
    except ValueError:
        return None


def _toml(value: bool | int | float | str) -> str:
    """A scalar as TOML writes it (for a fix the user can paste)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return f'"{value}"' if isinstance(value, str) else repr(value)
