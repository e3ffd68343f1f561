"""Request traces read as they are published: when each request arrived, its input and output length in tokens,
and optionally its session and its text (load.mode = "trace", docs/workloads.md).

Formats (`load.trace.format`; by default told from the file's first line):
- `mooncake`: JSON lines `{"timestamp": ms, "input_length": n, "output_length": n, "hash_ids": [...]}`
  (kvcache-ai/Mooncake FAST25-release/traces), optional `session_id`; other keys are ignored. `hash_ids` name the
  row's 512-token blocks in order (rows with an id in common share that block: loadgen.prompts.replay builds them
  so); a row may name at most ceil(input_length / 512) of them.
- `azure`: CSV `TIMESTAMP,ContextTokens,GeneratedTokens` with ISO date-times (Azure/AzurePublicDataset
  AzureLLMInferenceTrace_code.csv, _conv.csv, the 2024 week-long traces).
- `jsonl` / `csv`: loadgen's own, `timestamp_s`, `input_tokens`, `output_tokens`, optional `session_id` and
  `text` (a row with text is sent as it is; `input_tokens` is then optional, recorded as the target).
A `.gz` file is read compressed; a token count of 0 is sent as 1. Times become seconds after the first row; rows
are ordered by time (a stable sort: rows at the same instant keep their order in the file).
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

from loadgen.errors import ConfigError

FORMATS = ("mooncake", "azure", "jsonl", "csv")
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_OWN_KEYS = ("timestamp_s", "input_tokens", "output_tokens", "session_id", "text")
BLOCK_TOKENS = 512   # a Mooncake hash id's block of prompt tokens


@dataclass(frozen=True, slots=True)
class TraceRow:
    """One request of a trace."""

    index: int                  # its position among the file's data rows (0 = the first), for requests.prompt_id
    t_s: float                  # arrival in seconds after the trace's first row
    input_tokens: int | None    # None only for a row with text and no count
    output_tokens: int
    session_id: str | None = None
    text: str | None = None
    hash_ids: tuple[int, ...] = ()   # a Mooncake row's blocks of BLOCK_TOKENS, in order (the last may be partial)


@dataclass(frozen=True)
class Trace:
    name: str                   # the file's name without suffixes: requests.template of the rows it sends
    format: str
    rows: tuple[TraceRow, ...]  # in time order, the first at t_s = 0

    @property
    def span_s(self) -> float:
        """Seconds from the first row to the last (at the trace's own pace)."""
        return self.rows[-1].t_s if self.rows else 0.0

    def peak_rate(self, window_s: float) -> float:
        """The most rows that arrive within any `window_s` of the trace's time, per second (the whole trace's rate
        when it is shorter than the window)."""
        times = [r.t_s for r in self.rows]
        if self.span_s <= window_s:
            return len(times) / max(self.span_s, 1e-9) if len(times) > 1 else 0.0
        most, first = 0, 0
        for last, t in enumerate(times):
            while times[first] <= t - window_s:
                first += 1
            most = max(most, last - first + 1)
        return most / window_s

    def reusable_tokens(self) -> list[int]:
        """Per row, the tokens of its prompt that a large enough prefix cache holds from earlier rows: its leading
        hash ids seen in an earlier row, x BLOCK_TOKENS (at most its input length; 0 for a row without ids)."""
        seen: set[int] = set()
        out = []
        for row in self.rows:
            lead = next((i for i, h in enumerate(row.hash_ids) if h not in seen), len(row.hash_ids))
            out.append(min(lead * BLOCK_TOKENS, row.input_tokens or 0))
            seen.update(row.hash_ids)
        return out

    def select(self, start_s: float, duration_s: float | None, sample: float, seed: int) -> Trace:
        """The rows in [start_s, start_s + duration_s) of the trace's time, each kept with probability `sample`
        (a seeded draw per row, so the same seed thins the same rows), times again from the first kept row."""
        end = math.inf if duration_s is None else start_s + duration_s
        rng = random.Random(f"trace-sample:{seed}")
        kept = [r for r in self.rows if start_s <= r.t_s < end and (sample >= 1.0 or rng.random() < sample)]
        t0 = kept[0].t_s if kept else 0.0
        return Trace(self.name, self.format, tuple(_shifted(r, t0) for r in kept))


def read_trace(path: Path, fmt: str | None, key: str) -> Trace:
    """The trace in `path` (format `fmt`, or told from its first line). ConfigError on `key` (the setting that
    named the file) with the line and the fix for anything unreadable."""
    text = _read(path, key)
    first = next((line for line in text.splitlines() if line.strip()), "")
    fmt = fmt or _detect(first, path, key)
    reader = {"mooncake": _mooncake, "azure": _azure, "jsonl": _own_jsonl, "csv": _own_csv}[fmt]
    rows = sorted(reader(text, _Where(path, key, fmt)), key=lambda r: r.t_s)
    if not rows:
        raise ConfigError(key, f"{path} holds no trace rows", f"check that it is a {fmt} trace (docs/workloads.md)")
    t0 = rows[0].t_s
    name = path.name.split(".")[0] or "trace"
    return Trace(name, fmt, tuple(_shifted(r, t0) for r in rows))


def _shifted(row: TraceRow, t0: float) -> TraceRow:
    return replace(row, t_s=row.t_s - t0)


@dataclass(frozen=True)
class _Where:
    """Where a row comes from, for errors."""

    path: Path
    key: str
    fmt: str

    def bad(self, line: int, problem: str) -> NoReturn:
        raise ConfigError(self.key, f"{self.path} line {line}: {problem}",
                          f"fix the row; a {self.fmt} trace row is described in docs/workloads.md")


def _read(path: Path, key: str) -> str:
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rt", encoding="utf-8") as f:
                return f.read()
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError, EOFError) as exc:
        raise ConfigError(key, f"{path} cannot be read ({exc})", "give a readable trace file") from exc


def _detect(first: str, path: Path, key: str) -> str:
    """mooncake or jsonl for a JSON object line, azure or csv for a CSV header."""
    if first.lstrip().startswith("{"):
        try:
            row = json.loads(first)
        except json.JSONDecodeError:
            row = {}
        if isinstance(row, dict) and "input_length" in row:
            return "mooncake"
        if isinstance(row, dict) and ("input_tokens" in row or "text" in row):
            return "jsonl"
    header = [c.strip() for c in first.split(",")]
    if tuple(header[:3]) == AZURE_COLUMNS:
        return "azure"
    if "timestamp_s" in header:
        return "csv"
    raise ConfigError(key, f"{path} is not a trace loadgen knows (first line: {first[:80]!r})",
                      f"give format = one of {', '.join(FORMATS)} and a file in it (docs/workloads.md)")


def _json_rows(text: str, where: _Where) -> Iterator[tuple[int, int, dict]]:
    """(line number, data row index, object) per non-empty line."""
    index = 0
    for line, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw)
        except json.JSONDecodeError as exc:
            where.bad(line, f"not valid JSON ({exc.msg})")
        if not isinstance(row, dict):
            where.bad(line, "not a JSON object")
        yield line, index, row
        index += 1


def _mooncake(text: str, where: _Where) -> Iterator[TraceRow]:
    for line, index, row in _json_rows(text, where):
        for name in ("timestamp", "input_length", "output_length"):
            if name not in row:
                where.bad(line, f'has no "{name}"')
        length = _count(row["input_length"], "input_length", where, line)
        yield TraceRow(index, _time(row["timestamp"], where, line) / 1000.0, length,
                       _count(row["output_length"], "output_length", where, line),
                       _session(row.get("session_id"), where, line),
                       hash_ids=_hash_ids(row.get("hash_ids", []), length, where, line))


def _own_jsonl(text: str, where: _Where) -> Iterator[TraceRow]:
    for line, index, row in _json_rows(text, where):
        unknown = sorted(set(row) - set(_OWN_KEYS))
        if unknown:
            where.bad(line, f"unknown key {unknown[0]!r} (keys: {', '.join(_OWN_KEYS)})")
        yield _own_row(row, index, where, line)


def _own_csv(text: str, where: _Where) -> Iterator[TraceRow]:
    reader = csv.DictReader(io.StringIO(text))
    unknown = sorted(set(reader.fieldnames or ()) - set(_OWN_KEYS))
    if unknown:
        where.bad(1, f"unknown column {unknown[0]!r} (columns: {', '.join(_OWN_KEYS)})")
    for index, row in enumerate(reader):
        cells = {k: v for k, v in row.items() if v not in (None, "")}
        yield _own_row(cells, index, where, reader.line_num)


def _own_row(row: dict, index: int, where: _Where, line: int) -> TraceRow:
    for name in ("timestamp_s", "output_tokens"):
        if name not in row:
            where.bad(line, f'has no "{name}"')
    text = row.get("text")
    if text is not None and (not isinstance(text, str) or not text.strip()):
        where.bad(line, "text must be a non-empty string")
    if text is None and "input_tokens" not in row:
        where.bad(line, 'needs "input_tokens" (or "text" to send as it is)')
    count = None if row.get("input_tokens") is None else _count(row["input_tokens"], "input_tokens", where, line)
    return TraceRow(index, _time(row["timestamp_s"], where, line), count,
                    _count(row["output_tokens"], "output_tokens", where, line),
                    _session(row.get("session_id"), where, line), text)


def _azure(text: str, where: _Where) -> Iterator[TraceRow]:
    reader = csv.reader(io.StringIO(text))
    header = tuple(c.strip() for c in next(reader, []))
    if header[:3] != AZURE_COLUMNS:
        where.bad(1, f"the header is {','.join(header)!r}, not {','.join(AZURE_COLUMNS)}")
    first: datetime | None = None   # times relative to the first row's: exact to the microsecond
    for index, cells in enumerate(reader):
        line = reader.line_num
        if len(cells) < 3:
            where.bad(line, f"has {len(cells)} columns, not 3")
        try:
            when = datetime.fromisoformat(cells[0].strip())
        except ValueError:
            where.bad(line, f"TIMESTAMP {cells[0]!r} is not a date and time")
        if when.tzinfo is None:   # read as UTC: local time would shift rows across a daylight-saving change
            when = when.replace(tzinfo=UTC)
        first = first or when
        yield TraceRow(index, (when - first).total_seconds(), _count(cells[1], "ContextTokens", where, line),
                       _count(cells[2], "GeneratedTokens", where, line))


def _time(value: Any, where: _Where, line: int) -> float:
    try:
        t = float(value)
    except (TypeError, ValueError):
        where.bad(line, f"timestamp {value!r} is not a number")
    if isinstance(value, bool) or not math.isfinite(t):
        where.bad(line, f"timestamp {value!r} is not a finite number")
    return t


def _count(value: Any, name: str, where: _Where, line: int) -> int:
    """A token count (a string from a CSV cell, or a JSON number); 0 counts as 1, the least a server can be
    asked for."""
    try:
        n = int(value)
    except (TypeError, ValueError):
        where.bad(line, f"{name} {value!r} is not a whole number")
    if isinstance(value, bool) or isinstance(value, float) and value != n or n < 0:
        where.bad(line, f"{name} must be a whole number of tokens >= 0, got {value!r}")
    return max(n, 1)


def _hash_ids(value: Any, input_length: int, where: _Where, line: int) -> tuple[int, ...]:
    """A row's block ids: whole numbers, no more blocks of BLOCK_TOKENS than its input_length holds."""
    if not isinstance(value, list) or any(isinstance(h, bool) or not isinstance(h, int) for h in value):
        where.bad(line, f"hash_ids {value!r} is not a list of whole numbers")
    most = math.ceil(input_length / BLOCK_TOKENS)
    if len(value) > most:
        where.bad(line, f"hash_ids names {len(value)} blocks of {BLOCK_TOKENS} tokens, more than its input_length "
                  f"{input_length} holds ({most}); give at most {most} ids or a longer input_length")
    return tuple(value)


def _session(value: Any, where: _Where, line: int) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        where.bad(line, f"session_id {value!r} is not a string or a number")
    return str(value)
