"""The twin's parts against the engine's own ground truth (virtual time, no Ray): acceptance read from request counts
and from one-step frames, the twin file and its what-ifs, predicted runs in the tables (schema 6) with every query
and the answer saying PREDICTED, and bad input refused in one line."""

from __future__ import annotations

import dataclasses
import json
import random
import types
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from loadgen.config import parse_experiment
from loadgen.config.targets import TwinRef
from loadgen.emulator import profiles
from loadgen.emulator.calibration import spec_for
from loadgen.emulator.simulate import SimPrompt, Window, build_engine, run_closed
from loadgen.errors import ConfigError
from loadgen.results import analysis
from loadgen.results.schema import SCHEMA_VERSION
from loadgen.results.sequential import Pair, decide_lead
from loadgen.twin import acceptance, crossover
from loadgen.twin.fit import PARAMS, _Problem
from loadgen.twin.model import load_twin
from loadgen.twin.observe import Level
from loadgen.twin.predict import twin_targets
from loadgen.twin.whatif import load_target
from sqlfixtures import Results
from twinkit import hidden_profile


def _engine_run(setup: str, accept_p: float, decay: float, tokens: int = 128, seed: int = 0, slope: float = 0.0):
    spec = spec_for(setup)
    spec = dataclasses.replace(spec, profile=dataclasses.replace(spec.profile, accept_p={"code": accept_p},
                                                                 accept_decay=decay, accept_sigma=0.0,
                                                                 accept_output_slope=slope))
    return run_closed(build_engine(spec, seed=seed), 4, [SimPrompt("code", 300)], tokens, Window(5, 400, 400, 0, 1e9))


@pytest.mark.parametrize("setup, p, decay, slope", [("mtp", 0.55, 1.0, 0.0), ("dflash2", 0.8, 1.0, -0.4),
                                                    ("eagle-b8", 0.7, 0.9, 0.3), ("eagle-b4", 0.85, 0.95, 0.0)])
def test_acceptance_length_of_p_is_the_engines(setup, p, decay, slope):
    """The expected completion / verify steps (a truncated geometric per step at the output's position, the last
    step cut) against the engine's own draws over a few hundred requests; and p read back from it."""
    run = _engine_run(setup, p, decay, tokens=256, slope=slope)
    done = [r for r in run.requests if r.done is not None]
    measured = sum(r.completion_tokens for r in done) / sum(r.spec_verify_ct for r in done)
    k = spec_for(setup).verify_tokens
    assert acceptance.accept_length(p, decay, k, 256, slope) == pytest.approx(measured, rel=0.02)
    assert acceptance.p_for_length(measured, decay, k, 256, slope) == pytest.approx(p, abs=0.02)


def test_decay_along_the_draft_and_drift_along_the_output_from_one_step_frames():
    """Each frame of a step-streaming server is one verify step: the decay and the drift come back from the
    counts, by position."""
    counts: dict[tuple[int, int], int] = {}
    for seed in range(3):
        for r in _engine_run("eagle-b8", 0.7, 0.9, tokens=512, seed=seed, slope=0.4).requests:
            position = 1
            for _, n in r.frames[1:-1]:   # not the prefill's token, not the cut last step
                key = (position // acceptance.POSITION_BUCKET * acceptance.POSITION_BUCKET, n)
                counts[key] = counts.get(key, 0) + 1
                position += n
    found = acceptance.from_steps({"code": counts}, 8)
    assert found.used > 5000 and found.decay == pytest.approx(0.9, abs=0.03)
    assert found.slope == pytest.approx(0.4, abs=0.1)
    assert acceptance.from_steps({"code": {(0, 1): 50, (0, 2): 50}}, 2).decay is None   # one drafted token


def test_twin_file_round_trip_and_what_ifs(tmp_path):
    hidden = hidden_profile(3, tmp_path, "mtp")
    twin = load_twin(hidden.truth)
    twin.save(tmp_path / "again.toml")
    assert load_twin(tmp_path / "again.toml") == twin
    plain = dataclasses.replace(twin, server=dataclasses.replace(twin.server, algorithm="NONE", draft="none",
                                                                 num_steps=None, topk=None, draft_tokens=None))
    plain.save(tmp_path / "plain.toml")   # a server without a draft (llama-server without -md) has no draft numbers
    assert load_twin(tmp_path / "plain.toml") == plain
    six = load_target(TwinRef(str(hidden.truth), draft_tokens=6, max_running_requests=8), "t")
    assert (six.server.draft_tokens, six.server.num_steps, six.server.max_running) == (6, 5, 8)
    assert six.what_if == "draft_tokens = 6, max_running_requests = 8"
    other = hidden_profile(4, tmp_path / "b", "dflash2")
    swapped = load_target(TwinRef(str(hidden.truth), algorithm_from=str(other.truth)), "t")
    assert swapped.server.draft == "block" and swapped.algorithm == load_twin(other.truth).algorithm
    assert swapped.hardware == twin.hardware
    with pytest.raises(ConfigError, match=r"t\.draft_tokens: must be >= 2"):
        load_target(TwinRef(str(hidden.truth), draft_tokens=1), "t")


def test_bad_twin_files_and_targets_are_one_line_errors(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[twin]\nrun = 'x'\n")
    with pytest.raises(ConfigError, match=r"^twin: .*bad\.toml is not a twin file"):
        load_twin(bad)
    with pytest.raises(ConfigError, match=r"targets\[0\]\.twin\.profile: twin file not found"):
        parse_experiment({"load": {"concurrency": [1]}, "targets": [{"name": "a", "twin": "nope.toml"}]},
                         tmp_path)
    hidden = hidden_profile(5, tmp_path, "mtp")
    with pytest.raises(ConfigError, match="needs exactly one of `url`"):
        parse_experiment({"load": {"concurrency": [1]}, "targets": [
            {"name": "a", "url": "http://127.0.0.1:1", "twin": str(hidden.truth)}]}, tmp_path)
    mixed = parse_experiment({"load": {"concurrency": [1]}, "targets": [
        {"name": "a", "url": "http://127.0.0.1:1"}, {"name": "b", "twin": str(hidden.truth)}]}, tmp_path)
    with pytest.raises(ConfigError, match=r"targets\[1\]\.twin: a twin runs in virtual time"):
        twin_targets(mixed)


def test_older_folders_without_the_predicted_column_read_as_measured(tmp_path):
    r = Results()
    r.run("old", schema_version=5)
    r.step("old", 0, "t")
    r.request("old", 0, "t", "old-1", sent_ms=1100, frames=[(1200, 3)])
    root = r.write(tmp_path)
    path = root / "steps" / "run_id=old" / "part-0-0.parquet"
    pq.write_table(pq.read_table(path).drop_columns(["predicted"]), path)
    con = analysis.open_results(root)
    assert con.execute("SELECT predicted FROM steps").fetchall() == [(False,)]
    [row] = analysis.run_query(con, "throughput_by_concurrency").to_pylist()
    assert row["predicted"] is False and SCHEMA_VERSION >= 7


def test_hidden_profiles_move_every_number_within_30_percent(tmp_path):
    seed = random.randrange(1 << 20)
    hidden = hidden_profile(seed, tmp_path)
    base_hw = profiles.load("hardware", "gb10")
    truth = load_twin(hidden.truth)
    for name in ("bandwidth_efficiency", "compute_tflops", "prefill_tflops", "step_overhead_ms"):
        assert 0.7 <= getattr(truth.hardware, name) / getattr(base_hw, name) <= 1.3, (seed, name)
    assert set(hidden.moves) >= {"accept_p.code", "accept_p.prose", "draft_forward_ms", "accept_sigma"}


def test_crossover_verdicts_and_the_predicted_interval():
    """A level is a pass where the other series leads; one step each is clear from 3% on; repeats are clear when
    their ranges do not overlap; the crossover is the highest lead below the first loss."""
    levels = {"mtp": {1: (100, 100, 100, 1), 8: (400, 400, 400, 1), 12: (500, 490, 510, 2), 16: (600, 600, 600, 1)},
              "d": {1: (140, 140, 140, 1), 8: (410, 410, 410, 1), 12: (520, 505, 535, 2), 16: (550, 550, 550, 1)}}
    found = crossover.verdicts(levels, "mtp", "d")
    assert {c: (v.passed, v.clear, v.runs) for c, v in found.items()} == {
        1.0: (True, True, 1), 8.0: (True, False, 1), 12.0: (True, False, 2), 16.0: (False, True, 1)}
    assert crossover.crossover(found) == 12.0
    base = {c: 100.0 * c for c in range(1, 11)}
    other = {c: 100.0 * c * (1.3 - 0.05 * c) for c in range(1, 11)}   # leads up to C = 5, behind from C = 6
    assert crossover.predicted_crossover(other, base, 0.1) == (5.0, 3.0, 7.0)


def test_the_draft_budget_job_checks_its_table_before_any_load(tmp_path):
    from loadgen.campaigns.budget import load_job
    from loadgen.config import load_toml
    data = load_toml(Path("jobs/experiments/draft-budget-twin.toml"), "--config")
    job, exp = load_job(data, Path("jobs/experiments").resolve(), "draft-budget-twin.toml")
    assert (job.baseline, job.drafted, job.own, job.budgets, job.fit_levels) == ("mtp", "dflash2", 8, (6, 4),
                                                                                 (1, 4, 16))
    assert (job.verdict, job.false_verdict) == ("paired", 0.05)
    for change, message in (({"budgets": [1]}, r"job\.budgets: must be a list of whole numbers >= 2"),
                            ({"drafted": "nope"}, r"job\.drafted: 'nope' is not a target"),
                            ({"verdict": "mean"}, r"job\.verdict: unknown verdict 'mean' \(fix: use \"paired\" or "),
                            ({"search_min": 0}, r"job\.search_min: must be a whole number >= 1, got 0"),
                            ({"false_verdict": 0.5}, r"job\.false_verdict: must be a share > 0 and < 0\.5, got 0\.5"),
                            ({"budgetz": [4]}, r"job\.budgetz: unknown key")):
        bad = dict(data, job={**data["job"], **change})
        with pytest.raises(ConfigError, match=message):
            load_job(bad, Path("jobs/experiments").resolve(), "x.toml")


def test_twin_error_pairs_a_server_that_hides_its_budget_with_the_unchanged_twin_only(tmp_path):
    """llama.cpp reports no draft budget (steps.draft_tokens NULL); its twin counts one from the frames (5). The
    twin's own prediction is compared with that server; a what-if of another budget never is."""
    r = Results()
    for run_id, predicted, budget, what_if in (("measured", False, None, None), ("twin", True, 5, None),
                                               ("what-if", True, 3, "draft_tokens = 3")):
        r.run(run_id)
        info = {"twin": {"source_run": "measured", "source_target": "llama", "fit_levels": [2.0],
                         "what_if": what_if}} if predicted else {}
        r.step(run_id, 0, "llama", algorithm="DRAFT", draft_tokens=budget, concurrency=2, emulated=False,
               predicted=predicted, server_info=json.dumps(info))
        for i in range(4):
            r.request(run_id, 0, "llama", f"{run_id}-{i}", sent_ms=1100 + 100 * i,
                      frames=[(1150 + 100 * i + 10 * k, 2) for k in range(4)], spec_verify_ct=4)
    rows = analysis.run_query(analysis.open_results(r.write(tmp_path)), "twin_error", {}).to_pylist()
    assert {(row["predicted_run"], row["measured_run"]) for row in rows} == {("twin", "measured")}
    tok_s = next(row for row in rows if row["metric"] == "tok_s")
    assert tok_s["in_fit"] is True and tok_s["error_pct"] == 0.0


def _tok_s_run(root: Path, run_id: str, levels: dict[str, dict[int, float]]) -> str:
    """A run with one step per (target, level) whose window holds tok_s tokens in 1 s (views.sql step_throughput)."""
    r = Results()
    r.run(run_id)
    step = 0
    for target, by_level in levels.items():
        for c, tok_s in by_level.items():
            r.step(run_id, step, target, concurrency=c)
            r.request(run_id, step, target, f"{run_id}-{step}", sent_ms=900, frames=[(1100, int(tok_s))])
            step += 1
    r.write(root)
    return run_id


def test_a_budgets_search_measures_the_baseline_only_where_the_campaign_has_not(tmp_path, monkeypatch):
    """The draft-budget campaign shares the baseline's steps: a budget's search measures MTP at a level only when no
    earlier run of the campaign did (or a re-run needs as many of its steps), and finds the same crossover."""
    from loadgen.campaigns import budget
    from loadgen.config.search import TwinStart
    mtp = {c: 100.0 * c for c in range(1, 33)}
    dflash = {c: 100.0 * c * (1.2 if c <= 10 else 0.9) for c in range(1, 33)}   # leads up to 10
    calls: list[tuple[int, tuple[str, ...]]] = []

    def measure(exp, results, name, urls, levels, log):
        [c] = levels
        calls.append((c, tuple(urls)))
        truth = {"mtp": mtp, "dflash2-b6": dflash}
        return _tok_s_run(results, f"{name}-{len(calls)}", {n: {c: truth[n][c]} for n in urls})

    monkeypatch.setattr(budget, "measure", measure)
    job = budget.BudgetJob("mtp", "dflash2", 8, (6,), (1, 4, 16), 1, 32, 2, verdict="medians")
    urls = {"mtp": "http://127.0.0.1:1", "dflash2-b6": "http://127.0.0.1:2"}
    start = TwinStart("dflash2-b6", 10, 9, 11)
    exp = types.SimpleNamespace(name="campaign")   # the search reads only its name; measure is the stand-in above
    alone = budget.seeded_crossover(exp, tmp_path, job, urls, "dflash2-b6", start, lambda line: None)
    assert alone[0] == 10 and calls == [(10, ("mtp", "dflash2-b6")), (11, ("mtp", "dflash2-b6"))]
    calls.clear()
    earlier = _tok_s_run(tmp_path, "earlier-budget", {"mtp": {c: mtp[c] for c in (11, 12)}})
    shared = budget.seeded_crossover(exp, tmp_path, job, urls, "dflash2-b6", start, lambda line: None, (earlier,))
    assert shared[0] == 10 and calls == [(10, ("mtp", "dflash2-b6")), (11, ("dflash2-b6",))]


def test_a_crossover_inside_a_tie_is_answered_from_one_step_a_level_and_names_the_ties(tmp_path, monkeypatch):
    """Near a crossover the two series stay within 3% over several levels: the job's default (max_runs = 1)
    takes each level's point estimate instead of re-running it, and the answer says which levels were ties (the
    medians' rule: one step each, a difference under 3% is a tie)."""
    from loadgen.campaigns import budget
    from loadgen.config.search import TwinStart
    mtp = {c: 100.0 * c for c in range(1, 33)}
    dflash = {c: 100.0 * c * (1.01 if c <= 10 else 0.99) for c in range(1, 33)}   # a 1% lead up to 10
    calls: list[int] = []

    def measure(exp, results, name, urls, levels, log):
        calls.extend(levels)
        truth = {"mtp": mtp, "dflash2-b6": dflash}
        return _tok_s_run(results, f"{name}-{len(calls)}", {n: {c: truth[n][c] for c in levels} for n in urls})

    monkeypatch.setattr(budget, "measure", measure)
    urls = {"mtp": "http://127.0.0.1:1", "dflash2-b6": "http://127.0.0.1:2"}
    exp = types.SimpleNamespace(name="campaign")
    answers = {}
    for max_runs in (1, 2):
        calls.clear()
        job = budget.BudgetJob("mtp", "dflash2", 8, (6,), (1, 4, 16), 1, 32, max_runs, verdict="medians")
        found, _, _, ties = budget.seeded_crossover(exp, tmp_path / str(max_runs), job, urls, "dflash2-b6",
                                                    TwinStart("dflash2-b6", 10, 9, 11), lambda line: None)
        answers[max_runs] = (found, list(calls), ties)
    assert answers[1] == (10, [10, 11], [10, 11])
    assert answers[2][:2] == (10, [10, 10, 11, 11])   # the re-runs (their equal ranges then call it: no noise here)
    rows = [(6, 10, 9, 11, (10, [10, 11]), [10, 11], 4, 40.0), (8, 12, 11, 13, (12, []), [12, 13], 4, 40.0)]
    job = budget.BudgetJob("mtp", "dflash2", 8, (6,), (1, 4, 16), 1, 32, verdict="medians")
    text = budget.summary(rows, job, (6, 60.0), "p", tmp_path)
    assert "too close to call (within 3%, a tie; decided by the point estimate): budget 6 at C = 10, 11" in text
    assert "budget 8 -> 6: the crossover moves left (12 -> 10) predicted, left (12 -> 10) measured" in text


def _paired_run(root: Path, run_id: str, levels: dict[str, dict[int, float]], noise: float, seed: int = 0) -> str:
    """A run with one step per (target, level) of 32 requests, the prompts p0, p1, ... in that order as every target
    draws them: each prompt's own length moves every target's time alike, each request has its own `noise`
    (log-normal sd), and a target's times are divided by its speed there (64 tokens each)."""
    r = Results()
    r.run(run_id)
    rnd = random.Random(f"{run_id}/{seed}")
    lengths = [random.Random(k).lognormvariate(0, 0.3) for k in range(32)]
    step = 0
    for target, by_level in levels.items():
        for c, speed in by_level.items():
            r.step(run_id, step, target, concurrency=c)
            for k, length in enumerate(lengths):
                sent = 1000 + 10 * k
                done = sent + 1000 * length * rnd.lognormvariate(0, noise) / speed
                r.request(run_id, step, target, f"{run_id}-{step}-{k}", sent_ms=sent, prompt_id=f"p{k}",
                          frames=[(sent + 50, 1), (done, 63)])
            step += 1
    r.write(root)
    return run_id


def test_the_paired_verdict_calls_a_lead_from_prompts_served_in_different_runs(tmp_path, monkeypatch):
    """The campaign's default verdict reads the lead prompt by prompt: an 8% lead up to C = 10 and an 8% deficit
    above are clear calls from one step a level, also where MTP's prompts were served by an earlier budget's run
    (the pairs cross runs); a 1% difference in noisy requests is no call, named a tie and decided by its point
    estimate."""
    from loadgen.campaigns import budget
    from loadgen.config.search import TwinStart
    calls: list[tuple[int, tuple[str, ...]]] = []
    speeds = {"mtp": {c: 1.0 for c in range(1, 33)}}

    def measure(exp, results, name, urls, levels, log):
        [c] = levels
        calls.append((c, tuple(urls)))
        return _paired_run(results, f"{name}-{len(calls)}", {n: {c: speeds[n][c]} for n in urls}, noise)

    monkeypatch.setattr(budget, "measure", measure)
    urls = {"mtp": "http://127.0.0.1:1", "dflash2-b6": "http://127.0.0.1:2"}
    exp = types.SimpleNamespace(name="campaign")
    start = TwinStart("dflash2-b6", 10, 9, 11)
    job = budget.BudgetJob("mtp", "dflash2", 8, (6,), (1, 4, 16), 1, 32)
    assert job.verdict == "paired"
    noise = 0.05
    speeds["dflash2-b6"] = {c: 1.08 if c <= 10 else 1 / 1.08 for c in range(1, 33)}
    earlier = _paired_run(tmp_path, "earlier-budget", {"mtp": {11: 1.0}}, noise)
    found, _, probed, ties = budget.seeded_crossover(exp, tmp_path, job, urls, "dflash2-b6", start, lambda line: None,
                                                     (earlier,))
    assert (found, probed, ties) == (10, [10, 11], [])
    assert calls == [(10, ("mtp", "dflash2-b6")), (11, ("dflash2-b6",))]   # MTP at 11: the earlier run's prompts
    pairs = crossover.level_pairs(tmp_path, [earlier, "campaign-dflash2-b6-c10-1", "campaign-dflash2-b6-c11-2"],
                                  "mtp", "dflash2-b6")
    assert {c: len(p) for c, p in pairs.items()} == {10: 32, 11: 32}
    assert decide_lead(pairs[10], 0.05).ratio == pytest.approx(1.08, rel=0.02)
    assert decide_lead(pairs[11], 0.05).ratio == pytest.approx(1 / 1.08, rel=0.02)
    calls.clear()
    noise = 0.15
    speeds["dflash2-b6"] = {c: 1.01 if c <= 10 else 0.99 for c in range(1, 33)}
    found, _, probed, ties = budget.seeded_crossover(exp, tmp_path / "tie", job, urls, "dflash2-b6", start,
                                                     lambda line: None)
    assert (found, probed, ties) == (10, [10, 11], [10, 11])
    rows = [(6, 10, 9, 11, (10, [10, 11]), [10, 11], 4, 40.0)]
    text = budget.summary(rows, budget.BudgetJob("mtp", "dflash2", 6, (), (1, 4, 16), 1, 32), (6, 60.0), "p",
                          tmp_path)
    assert ("too close to call (no call at 5% false verdicts: a tie within 3%, or too few prompts to tell; decided "
            "by the point estimate): budget 6 at C = 10, 11") in text


def test_the_paired_verdict_reads_the_known_speed_of_an_emulator_in_virtual_time(tmp_path):
    """Ground truth: the emulator's engine (the shipped MTP profile, virtual time) against a copy of itself that
    computes 6% faster (5.5% more tok/s over long windows: not every part of a request scales) and against an equal
    copy, each with its own draws, at C = 2 and 8 over a 120 s window: the lead is called the right way with its
    ratio within 2% of the known one, and the equal copy's ratio is inside the tie band."""
    from loadgen.twin.vtime import Protocol, simulate
    twin = load_twin(hidden_profile(0, tmp_path / "mtp", "mtp", spread=0.0).truth)
    rnd = random.Random(1)
    prompts = [SimPrompt(rnd.choice(("code", "prose")), rnd.randint(128, 512)) for _ in range(400)]
    window = Protocol(2.0, 120.0, 0, 120.0, 60.0)
    for factor, known in ((1.06, 1.055), (1.0, 1.0)):
        other = dataclasses.replace(twin, time_scale=twin.time_scale * factor)
        for c in (2, 8):
            served = [{r.index: r for r in simulate(t, c, prompts, window, seed, 128).requests
                       if r.sent >= window.warmup_s and r.done is not None} for t, seed in ((twin, c), (other, c + 1))]
            pairs = [Pair(b.done - b.sent, b.completion_tokens, o.done - o.sent, o.completion_tokens)
                     for i, o in sorted(served[1].items()) if (b := served[0].get(i))]
            lead = decide_lead(pairs, 0.05)
            assert len(pairs) > 120 and lead.ratio == pytest.approx(known, abs=0.02), (factor, c, lead)
            if factor > 1:
                assert lead.verdict == "ahead", (c, lead)


def test_an_unclear_level_measures_the_baseline_again_only_when_it_has_no_more_steps_than_the_budget():
    from loadgen.campaigns.budget import baseline_needed
    levels = {"mtp": {4: (100.0, 99.0, 101.0, 2), 8: (200.0, 200.0, 200.0, 1)},
              "b6": {4: (101.0, 101.0, 101.0, 1), 8: (201.0, 201.0, 201.0, 1)}}
    assert not baseline_needed(levels, "mtp", "b6", 4)   # MTP has 2 steps there, b6 gets its second
    assert baseline_needed(levels, "mtp", "b6", 8)       # 1 each: a re-run measures both
    assert baseline_needed(levels, "mtp", "b6", 16)      # a new level


def test_a_prompt_the_server_had_cached_is_prefilled_without_its_cached_tokens():
    """A measured request's cached_tokens are left out of its prefill in virtual time, as the server left them out:
    300 tokens with 200 cached take the first token as fast as 100 uncached ones, faster than 300."""
    spec = spec_for("mtp")

    def ttft(prompt: SimPrompt) -> float:
        run = run_closed(build_engine(spec), 1, [prompt], 16, Window(0, 5, 5, 0, 1e9), stagger=False)
        return run.requests[0].first - run.requests[0].sent

    assert ttft(SimPrompt("code", 300, 200)) == pytest.approx(ttft(SimPrompt("code", 100)), rel=1e-9)
    assert ttft(SimPrompt("code", 300, 200)) < 0.6 * ttft(SimPrompt("code", 300))


def test_the_fit_weighs_a_figure_by_how_much_its_window_moves_by_chance(tmp_path):
    """One prompt at C = 1 gives the same TTFT in every seeded run: its miss counts in full. Many prompts at C = 16
    bunch differently from seed to seed: its TTFT p50 is one draw, and the same miss weighs less."""
    twin = load_twin(hidden_profile(1, tmp_path, algorithm="mtp", spread=0.0).truth)
    rnd = random.Random(5)
    workload = {1: [SimPrompt("code", 300)],
                16: [SimPrompt(rnd.choice(("code", "prose")), rnd.randint(128, 512)) for _ in range(400)]}
    levels = [Level(1, 20, 2.0, 6.0, {}), Level(16, 25, 2.0, 6.0, {})]
    problem = _Problem(workload, [p for p in PARAMS if p.name == "prefill_tflops"])
    noise = problem.window_noise(twin, levels)
    assert noise[1]["ttft_p50_ms"] < 0.005 < 0.05 < noise[16]["ttft_p50_ms"]
    problem.noise = noise
    x = problem.x_of(twin)
    sim = {lv.concurrency: problem.figures(twin, lv) for lv in levels}
    missed = [dataclasses.replace(lv, figures={"ttft_p50_ms": 1.2 * sim[lv.concurrency]["ttft_p50_ms"]})
              for lv in levels]
    at_1, at_16 = (abs(problem.residuals(twin, x, x, [lv])[1]) for lv in missed)
    assert at_16 < 0.6 * at_1
