"""Experiment validation: every bad input is one clear error naming the key, before anything runs."""

from __future__ import annotations

import copy
import tomllib
from pathlib import Path

import pytest

from loadgen.campaigns.budget import load_job
from loadgen.config import load_experiment, parse_experiment
from loadgen.errors import ConfigError
from loadgen.plan.steps import grid_steps, split_concurrency

REPO = Path(__file__).parents[2]
GOOD = {
    "run": {"name": "ok"},
    "load": {"concurrency": [1, 2], "measure_s": 5.0},
    "prompts": {"max_new_tokens": 16},
    "targets": [{"name": "a", "url": "http://127.0.0.1:30000"},
                {"name": "b", "emulator": {"speculative-algorithm": "NEXTN", "speculative-num-steps": 3}}],
}


def _with(path: str, value) -> dict:
    """GOOD with one dotted key set (value ... deletes it); list items as name[i]."""
    data = copy.deepcopy(GOOD)
    *parents, last = path.split(".")
    node = data
    for part in parents:
        name, _, index = part.partition("[")
        node = node[name] if not index else node[name][int(index[:-1])]
    if value is ...:
        del node[last]
    else:
        node[last] = value
    return data


BAD = [
    # (case, data, the key the message must name, a word the message must contain)
    ("unknown top-level table", _with("laod", {}), "laod", "unknown key"),
    ("unknown run key", _with("run.nmae", "x"), "run.nmae", "unknown key"),
    ("unsafe run name", _with("run.name", "../etc"), "run.name", "safe name"),
    ("run name with quote", _with("run.name", "a'b"), "run.name", "safe name"),
    ("run name wrong type", _with("run.name", 3), "run.name", "must be a string"),
    ("results not a string", _with("run.results", 1), "run.results", "must be a string"),
    ("load not a table", _with("load", [1]), "load", "must be a table"),
    ("unknown load key", _with("load.concurency", [1]), "load.concurency", "unknown key"),
    ("concurrency missing", _with("load.concurrency", ...), "load.concurrency", "required"),
    ("concurrency empty", _with("load.concurrency", []), "load.concurrency", "empty"),
    ("concurrency zero", _with("load.concurrency", [0]), "load.concurrency[0]", ">= 1"),
    ("concurrency negative", _with("load.concurrency", [4, -1]), "load.concurrency[1]", ">= 1"),
    ("concurrency float", _with("load.concurrency", [1.5]), "load.concurrency[0]", "whole number"),
    ("concurrency bool", _with("load.concurrency", [True]), "load.concurrency[0]", "whole number"),
    ("concurrency string", _with("load.concurrency", "1,2"), "load.concurrency", "must be a list"),
    ("concurrency duplicate", _with("load.concurrency", [2, 2]), "load.concurrency", "twice"),
    ("measure zero", _with("load.measure_s", 0), "load.measure_s", "> 0"),
    ("measure negative", _with("load.measure_s", -5), "load.measure_s", "> 0"),
    ("measure inf", _with("load.measure_s", float("inf")), "load.measure_s", "finite"),
    ("measure nan", _with("load.measure_s", float("nan")), "load.measure_s", "finite"),
    ("warmup negative", _with("load.warmup_s", -1), "load.warmup_s", ">= 0"),
    ("warmup string", _with("load.warmup_s", "3s"), "load.warmup_s", "must be a number"),
    ("drain negative", _with("load.drain_timeout_s", -1.0), "load.drain_timeout_s", ">= 0"),
    ("stall zero", _with("load.stall_timeout_s", 0), "load.stall_timeout_s", "> 0"),
    ("request timeout negative", _with("load.request_timeout_s", -3), "load.request_timeout_s", "> 0"),
    ("repeats zero", _with("load.repeats", 0), "load.repeats", ">= 1"),
    ("repeats float", _with("load.repeats", 2.0), "load.repeats", "must be a whole number"),
    ("workers zero", _with("load.workers_per_target", 0), "load.workers_per_target", ">= 1"),
    ("unknown mode", _with("load.mode", "burst"), "load.mode", "unknown mode"),
    ("unknown schedule", _with("load.schedule", "serial"), "load.schedule", "unknown schedule"),
    ("flush not bool", _with("load.flush_cache", "yes"), "load.flush_cache", "must be true or false"),
    ("realtime not bool", _with("load.realtime_priority", 0), "load.realtime_priority", "must be true or false"),
    ("targets missing", _with("targets", ...), "targets", "required"),
    ("targets empty", _with("targets", []), "targets", "empty"),
    ("target not a table", _with("targets", ["http://x"]), "targets[0]", "must be a table"),
    ("target without name", _with("targets[0].name", ...), "targets[0].name", "required"),
    ("target unsafe name", _with("targets[0].name", "a b"), "targets[0].name", "safe name"),
    ("duplicate target name", _with("targets[1].name", "a"), "targets[1].name", "duplicate"),
    ("unknown flavor", _with("targets[0].flavor", "tgi"), "targets[0].flavor", "unknown flavor"),
    ("url and emulator", _with("targets[0].emulator", {}), "targets[0]", "exactly one"),
    ("neither url nor emulator", _with("targets[0].url", ...), "targets[0]", "exactly one"),
    ("url https", _with("targets[0].url", "https://127.0.0.1:1"), "targets[0].url", "http://host:port"),
    ("url without scheme", _with("targets[0].url", "127.0.0.1:30000"), "targets[0].url", "http://host:port"),
    ("url bad port", _with("targets[0].url", "http://127.0.0.1:99999"), "targets[0].url", "bad port"),
    ("url with path", _with("targets[0].url", "http://127.0.0.1:1/generate"), "targets[0].url", "has a path"),
    ("unknown target key", _with("targets[0].api_key", "sk-123"), "targets[0].api_key", "unknown key"),
    ("emulator host chosen by loadgen", _with("targets[1].emulator", {"port": 1}), "targets[1].emulator.port",
     "chosen by loadgen"),
    ("emulator unknown algorithm", _with("targets[1].emulator", {"speculative-algorithm": "MEDUSA"}),
     "targets[1].emulator.speculative-algorithm", "unknown algorithm"),
    ("emulator flag list", _with("targets[1].emulator", {"seed": [1]}), "targets[1].emulator.seed", "must be"),
    ("emulator misspelt flag", _with("targets[1].emulator", {"speculative-num-step": 3}), "targets[1].emulator",
     "rejects these flags"),
    ("emulator flag bad value", _with("targets[1].emulator", {"speculative-num-steps": 0}), "targets[1].emulator",
     "rejects these flags"),
    ("prompts unknown key", _with("prompts.max_tokens", 3), "prompts.max_tokens", "unknown key"),
]


@pytest.mark.parametrize("case,data,key,word", BAD, ids=[b[0] for b in BAD])
def test_bad_input_names_the_key(case, data, key, word):
    with pytest.raises(ConfigError) as err:
        parse_experiment(data, REPO)
    assert err.value.key == key, str(err.value)
    assert word in str(err.value), str(err.value)


def test_duplicate_urls_rejected():
    data = copy.deepcopy(GOOD)
    data["targets"][1] = {"name": "c", "url": "http://127.0.0.1:30000/"}
    with pytest.raises(ConfigError, match="same url"):
        parse_experiment(data, REPO)


def test_missing_and_broken_files(tmp_path):
    with pytest.raises(ConfigError, match="file not found"):
        load_experiment(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[load\nconcurrency = 1")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_experiment(bad)


def test_good_config_and_plan():
    exp = parse_experiment(_with("load.repeats", 2), REPO)
    assert exp.targets[0].url == "http://127.0.0.1:30000" and exp.targets[1].url is None
    assert exp.targets[1].emulator_args == ("--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3",
                                            "--model-path", "emulated/qwen3.8-27b-nvfp4")
    steps = grid_steps(exp, exp.targets)
    assert [(s.repeat, s.loads[0].concurrency, s.targets) for s in steps] == [
        (0, 1, ("a", "b")), (0, 2, ("a", "b")), (1, 1, ("a", "b")), (1, 2, ("a", "b"))]
    assert [s.step_id for s in steps] == [0, 1, 2, 3]
    assert exp.load.realtime_priority  # the default; false only for a client sharing cores with the server
    assert not parse_experiment(_with("load.realtime_priority", False), REPO).load.realtime_priority


def test_one_at_a_time_schedule():
    exp = parse_experiment(_with("load.schedule", "one_at_a_time"), REPO)
    steps = grid_steps(exp, exp.targets)
    assert [(s.loads[0].concurrency, s.targets) for s in steps] == [(1, ("a",)), (1, ("b",)), (2, ("a",)), (2, ("b",))]


@pytest.mark.parametrize("total,workers", [(1, 1), (1, 3), (7, 3), (32, 4), (5, 5)])
def test_split_concurrency_is_exact_and_even(total, workers):
    shares = split_concurrency(total, workers)
    assert sum(shares) == total and len(shares) == workers and max(shares) - min(shares) <= 1


def test_shipped_experiments_are_valid():
    """Every shipped file loads the way its job loads it: a [job] table is the draft-budget job's own."""
    for path in sorted((REPO / "jobs" / "experiments").glob("*.toml")):
        data = tomllib.loads(path.read_text())
        exp = load_job(data, path.parent.resolve(), str(path))[1] if "job" in data else load_experiment(path)
        assert exp.targets, path


def test_misspelt_key_gets_a_did_you_mean(tmp_path):
    path = tmp_path / "exp.toml"
    path.write_text('[load]\nconcurency = [1, 2]\n[[targets]]\nname = "a"\nurl = "http://127.0.0.1:30000"\n')
    with pytest.raises(ConfigError) as err:   # a required key misspelt: named where it is missing
        load_experiment(path)
    assert err.value.key == "load.concurrency"
    assert "did you mean `concurrency` for `concurency`?" in str(err.value), str(err.value)
    with pytest.raises(ConfigError) as err:   # an optional one: named as unknown
        parse_experiment(_with("load.measure_ss", 5.0), REPO)
    assert err.value.key == "load.measure_ss"
    assert "did you mean `measure_s`?" in str(err.value), str(err.value)


def test_a_scalar_where_a_list_is_expected_shows_the_list(tmp_path):
    path = tmp_path / "exp.toml"
    path.write_text('[load]\nconcurrency = 4\n[[targets]]\nname = "a"\nurl = "http://127.0.0.1:30000"\n')
    with pytest.raises(ConfigError) as err:
        load_experiment(path)
    assert err.value.key == "load.concurrency"
    assert "(fix: write `concurrency = [4]`)" in str(err.value), str(err.value)
    with pytest.raises(ConfigError, match=r'write `concurrency = \["1,2"\]`'):
        parse_experiment(_with("load.concurrency", "1,2"), REPO)
