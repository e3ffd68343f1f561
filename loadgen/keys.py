"""Config keys declared once: each key's name, type, default, check and one-line help is one `Key`; the strict
table reader reads a table through its `Keys`, its errors come from them (the dotted key, what is wrong, the fix),
and docs/experiments.md's key tables are generated from them (loadgen.config.docs). A root leaf, so that every
wing that reads a table (config, prompts, results) declares its keys the same way."""

from __future__ import annotations

import copy
import difflib
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from loadgen.errors import ConfigError

REQUIRED: Any = ...          # a Key's default when the key must be given
_DECLARED: Any = object()    # read()'s default: the declaration's own
_TYPE_NAMES = {dict: "a table", list: "a list", str: "a string", int: "a whole number", float: "a number",
               bool: "true or false"}


@dataclass(frozen=True)
class Bounds:
    """A number's range: `low` and `high` are included unless `above` / `below` exclude them; a float must be
    finite."""

    low: float | None = None
    high: float | None = None
    above: bool = False      # value > low (else >=)
    below: bool = False      # value < high (else <=)
    what: str = ""           # the value's noun in the error ("a share"); empty: a whole or a finite number

    def describe(self) -> str:
        if self.low is not None and self.high is not None and not (self.above or self.below):
            return f"from {_number_text(self.low)} to {_number_text(self.high)}"
        parts = []
        if self.low is not None:
            parts.append(f"{'>' if self.above else '>='} {_number_text(self.low)}")
        if self.high is not None:
            parts.append(f"{'<' if self.below else '<='} {_number_text(self.high)}")
        return " and ".join(parts)

    def problem(self, value: float) -> str | None:
        """What is wrong with `value`, or None when it is within bounds."""
        inside = math.isfinite(value) and \
            (self.low is None or (value > self.low if self.above else value >= self.low)) and \
            (self.high is None or (value < self.high if self.below else value <= self.high))
        if inside:
            return None
        what = self.what or ("a whole number" if isinstance(value, int) else "a finite number")
        return f"must be {what} {self.describe()}, got {value!r}"


@dataclass(frozen=True)
class Choice:
    """A string that is one of `options`; `what` names it in the error ("unknown mode 'burst'")."""

    options: tuple[str, ...]
    what: str = "value"

    def describe(self) -> str:
        quoted = [f'"{o}"' for o in self.options]
        return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"

    def problem(self, value: str) -> str | None:
        return None if value in self.options else f"unknown {self.what} {value!r}"


@dataclass(frozen=True)
class Key:
    """One key of a table: its TOML type(s), its default (REQUIRED: must be given; None: unset), the check its
    value must pass, the fix shown when it fails, and the line that documents it."""

    name: str
    kind: type | tuple[type, ...]
    default: Any
    help: str
    check: Bounds | Choice | None = None
    fix: str = ""               # the fix when `check` fails; empty: one made from the check
    shown: str | None = None    # the default in the docs where it is not a constant (e.g. "measure_s")

    def problem(self, value: Any) -> tuple[str, str] | None:
        """(what is wrong, the fix) when `value` fails the check, else None; None (unset) always passes."""
        if self.check is None or value is None:
            return None
        problem = self.check.problem(value)
        if problem is None:
            return None
        if self.fix:
            return problem, self.fix
        if isinstance(self.check, Choice):
            return problem, f"use {self.check.describe()}"
        return problem, f"give `{self.name}` a number {self.check.describe()}"

    def shown_default(self) -> str:
        """The default as the docs show it."""
        if self.shown is not None:
            return self.shown
        if self.default is REQUIRED:
            return "required"
        return "unset" if self.default is None else toml_value(self.default)


@dataclass(frozen=True)
class Keys:
    """The declared keys of one table: `table` is its dotted name as the docs show it ("load", "targets.twin"),
    `about` the line above its docs table."""

    table: str
    about: str
    keys: tuple[Key, ...]

    def __post_init__(self) -> None:
        names = [k.name for k in self.keys]
        assert len(set(names)) == len(names), f"[{self.table}] declares a key twice"

    def __getitem__(self, name: str) -> Key:
        for k in self.keys:
            if k.name == name:
                return k
        raise KeyError(f"[{self.table}] declares no key {name!r}")

    def __iter__(self) -> Iterator[Key]:
        return iter(self.keys)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(k.name for k in self.keys)


class StrictTable:
    """Reads one TOML table, remembering which keys were used so leftovers can be reported. With `keys`, every
    key is read through its declaration (`read`); without, `get` names the type and default in the call."""

    def __init__(self, data: Any, key: str, keys: Keys | None = None) -> None:
        if not isinstance(data, dict):
            raise ConfigError(key, f"must be a table, got {type(data).__name__}", f"write it as [{key}]")
        self.data, self.key, self.keys = data, key, keys
        self.used: set[str] = set()

    def _key(self, name: str) -> str:
        return f"{self.key}.{name}" if self.key else name

    def read(self, name: str, default: Any = _DECLARED, kind: type | tuple[type, ...] | None = None) -> Any:
        """The declared key `name`, type-checked and checked; `default` and `kind` replace the declaration's only
        where they depend on another key (the declaration's `shown` says so in the docs)."""
        assert self.keys is not None, f"[{self.key}] has no declared keys"
        k = self.keys[name]
        value = self.get(name, k.kind if kind is None else kind, k.default if default is _DECLARED else default,
                         k.default)
        wrong = k.problem(value)
        if wrong is not None:
            raise ConfigError(self._key(name), *wrong)
        return copy.deepcopy(value) if value is k.default else value   # a declaration's table is never handed out

    def get(self, name: str, kind: type | tuple[type, ...], default: Any = ..., example: Any = None) -> Any:
        """`name`'s value of type `kind`, or `default` (... : required); `example` is the value a type error's fix
        shows."""
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
            fix = f"write `{name} = [{toml_value(value)}]`" if list in kinds and scalar else ""
            if float in kinds and not fix:
                fix = (f"write the number without quotes: `{name} = {value}`" if _number(value) is not None
                       else f"write a number: `{name} = <number>`")
            if int in kinds and not fix and isinstance(value, str) and value.strip().lstrip("-").isdigit():
                fix = f"write the number without quotes: `{name} = {value.strip()}`"
            if not fix:
                fix = (f"e.g. `{name} = {toml_value(example)}`" if isinstance(example, (bool, int, float, str))
                       else f"write `{name} = <{names}>`")
            raise ConfigError(key, f"must be {names}, got {type(value).__name__} {value!r}", fix)
        return value

    def done(self) -> None:
        """Every key given was read: a leftover is unknown here (a did-you-mean among the declared keys)."""
        unknown = sorted(set(self.data) - self.used)
        if unknown:
            known = sorted(self.used | set(self.keys.names if self.keys else ()))
            close = difflib.get_close_matches(unknown[0], known, n=1)
            listed = ", ".join(known)
            fix = f"did you mean `{close[0]}`? (known keys here: {listed})" if close else f"known keys here: {listed}"
            raise ConfigError(self._key(unknown[0]), "unknown key", fix)


def toml_value(value: Any) -> str:
    """A value as TOML writes it (for a fix the user can paste, and the docs' defaults)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }" if value else "{}"
    return repr(value)


def _number_text(value: float) -> str:
    """A bound as a person writes it: 16, 0.5, 1048576 (never 1.04858e+06)."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _number(value: Any) -> float | None:
    """A number written as text (`"2.10"`), else None."""
    try:
        return float(value) if isinstance(value, str) else None
    except ValueError:
        return None
