"""Each config key is declared once (loadgen/keys.py): docs/experiments.md's key tables are generated from the
declarations, and these tests fail when the docs miss a declared key, document one no table reads, or give
another default."""

from __future__ import annotations

import dataclasses
import re
import tomllib
from pathlib import Path

import pytest

from loadgen.config.cost import Prices
from loadgen.config.docs import BEGIN, END, READERS, SECTIONS, main, problems, render, rewrite
from loadgen.config.targets import TargetConfig
from loadgen.errors import ConfigError
from loadgen.keys import Bounds, Choice, Key, Keys, StrictTable
from loadgen.prompts.config import SOURCE_KINDS, PromptsConfig
from loadgen.results.slo import Slo

DOCS = Path(__file__).parents[2] / "docs" / "experiments.md"


def test_the_docs_key_tables_are_the_declarations():
    assert problems(DOCS.read_text()) == []
    assert main([str(DOCS), "--check"]) == 0


def test_a_declared_key_missing_from_the_docs_is_named():
    text = DOCS.read_text().replace("| `search_growth` |", "| `search_growt` |")
    assert "load.search_growth: declared but missing from docs/experiments.md" in problems(text)


def test_a_documented_key_no_table_declares_is_named():
    text = DOCS.read_text()
    at = text.index("| `measure_s` |")
    text = text[:at] + "| `measure_z` | number | 1.0 | > 0 | a key loadgen never read |\n" + text[at:]
    assert problems(text) == ["load.measure_z: documented in docs/experiments.md but no table declares it"]


def test_a_default_that_differs_is_named():
    text = DOCS.read_text().replace("| `repeats` | integer | 1 |", "| `repeats` | integer | 2 |")
    assert problems(text) == ["load.repeats: docs/experiments.md gives the default '2', the declaration '1'"]


def test_a_help_line_edited_by_hand_is_caught_and_rewritten():
    text = DOCS.read_text().replace("seeds the arrival times", "seeds the arrivals")
    assert problems(text) == ["docs/experiments.md: the key tables differ from the declarations (a type, bound or "
                              "help line)"]
    assert problems(rewrite(text)) == [] and rewrite(text) == DOCS.read_text()


def test_docs_without_the_generated_block_are_told_how_to_add_it():
    [problem] = problems("# Experiment files\n")
    assert BEGIN in problem and END in problem
    assert problems(rewrite("# Experiment files\n")) == []


def test_the_docs_sections_hold_every_key_each_table_reads():
    documented: dict[str, list[str]] = {}
    for section in SECTIONS:
        documented.setdefault(section.table, []).extend(section.names)
    for table, keys in READERS.items():
        if table != "targets.cost":   # [cost]'s keys, documented once
            assert sorted(documented[table]) == sorted(keys.names), table
    assert render().count("| `") == sum(len(s.keys) for s in SECTIONS)


def test_every_source_kind_takes_only_declared_keys():
    declared = set(READERS["prompts.sources"].names)
    assert all(set(keys) <= declared for keys in SOURCE_KINDS.values())
    assert set().union(*SOURCE_KINDS.values()) == declared


def _written_keys(data: dict, table: str = ""):
    """(table, key) of every key a TOML document writes, tables of tables followed; arrays of tables as one."""
    for name, value in data.items():
        yield table, name
        inner = f"{table}.{name}" if table else name
        rows = value if isinstance(value, list) and value and isinstance(value[0], dict) else [value]
        for row in rows:
            if isinstance(row, dict) and inner in READERS:
                yield from _written_keys(row, inner)


def test_the_docs_example_writes_only_declared_keys():
    [example] = re.findall(r"```toml\n(.*?)```", DOCS.read_text(), re.S)[:1]
    written = list(_written_keys(tomllib.loads(example)))
    assert ("load", "concurrency") in written and ("targets.cost", "node_hour") in written
    unknown = [f"{t}.{k}" for t, k in written if k not in READERS[t].names]
    assert unknown == []


@pytest.mark.parametrize("cls,keys", [(Slo, "slo"), (Prices, "cost"), (PromptsConfig, "prompts"),
                                      (TargetConfig, "targets")])
def test_a_config_dataclass_default_is_its_keys(cls, keys):
    """Where a config dataclass names a field like its key, the field's default is the declared one (a scalar's:
    a table or list is held parsed)."""
    declared = READERS[keys]
    shared = [f for f in dataclasses.fields(cls) if f.name in declared.names
              and isinstance(f.default, (bool, int, float, str, type(None)))]
    assert shared, cls
    for f in shared:
        assert f.default == declared[f.name].default, f"{cls.__name__}.{f.name}"


def test_the_reader_reads_a_key_through_its_declaration():
    keys = Keys("t", "a test table", (Key("n", int, 2, "a count", Bounds(1)), Key("m", str, "a", "a choice",
                                                                                   Choice(("a", "b"), "letter"))))
    t = StrictTable({"n": 5}, "t", keys)
    assert (t.read("n"), t.read("m")) == (5, "a")
    t.done()
    with pytest.raises(ConfigError, match=r"^t\.n: must be a whole number >= 1, got 0 \(fix: give `n` a number >= 1"):
        StrictTable({"n": 0}, "t", keys).read("n")
    with pytest.raises(ConfigError, match=r"^t\.m: unknown letter 'c' \(fix: use \"a\" or \"b\"\)$"):
        StrictTable({"m": "c"}, "t", keys).read("m")
    with pytest.raises(ConfigError, match=r"^t\.n: must be a whole number, got str '3' \(fix: write the number "
                       r"without quotes: `n = 3`\)$"):
        StrictTable({"n": "3"}, "t", keys).read("n")
    with pytest.raises(ConfigError, match=r"^t\.n: must be a whole number, got float 1\.5 \(fix: e\.g\. `n = 2`\)$"):
        StrictTable({"n": 1.5}, "t", keys).read("n")
    unread = StrictTable({"mm": 1}, "t", keys)
    with pytest.raises(ConfigError, match=r"t\.mm: unknown key \(fix: did you mean `m`\? \(known keys here: m, n\)\)"):
        unread.done()
