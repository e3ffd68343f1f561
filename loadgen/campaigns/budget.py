"""The field report's next experiment, asked of twins first (jobs/draft_budget_twin.py, docs/twin.md): does a lower
DFlash2 draft budget move its crossover with MTP?

1. Measure the baseline (MTP) and the drafted target at its own budget at a few levels ([load] concurrency).
2. Fit a twin of each (loadgen/twin/fit.py).
3. Predict every budget in virtual time at every level of the range: the crossover of each with the baseline, with
   an interval from the twins' tok/s error.
4. Confirm each budget's crossover with the twin-seeded search (loadgen/plan/search.py on the verdict "the
   drafted target is ahead", loadgen/twin/crossover.py: by default its lead read prompt by prompt, at a stated
   error rate, `[job] verdict`): it starts at the predicted crossover and measures that
   budget, one level a step, until the crossover is bracketed by adjacent levels. The baseline's steps are the
   campaign's: a level where the baseline was measured already (by the fit, or beside an earlier budget) is not
   measured again for it, unless a re-run needs as many baseline steps as the budget has (each step's prompts,
   load and window are the same, and every configuration runs on its own server).
Servers: an emulator target is launched once per budget (its --speculative-num-draft-tokens changed); a url target
needs `job.budget_urls` (one server per budget, as a fleet restarts them).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from loadgen.config import Experiment, StrictTable, TargetConfig, load_toml, parse_experiment
from loadgen.config.budget_job import BUDGET_JOB
from loadgen.config.search import SearchConfig, TwinStart
from loadgen.config.targets import TwinRef
from loadgen.driver import ray_setup
from loadgen.driver.runner import run_experiment
from loadgen.emulator.launch import EmulatorProcess
from loadgen.errors import ConfigError
from loadgen.plan.search import next_probe
from loadgen.results import analysis
from loadgen.results.folder import results_folder
from loadgen.results.sequential import Pair
from loadgen.results.sink import check_writable
from loadgen.results.slo import Verdict
from loadgen.twin import crossover
from loadgen.twin.fit import fit_twin
from loadgen.twin.model import Twin, load_twin
from loadgen.twin.observe import read_source
from loadgen.twin.predict import run_predicted

MIN_SPREAD = 0.03


@dataclass(frozen=True)
class BudgetJob:
    """The [job] table of jobs/experiments/draft-budget-twin.toml."""

    baseline: str                    # the target every budget is compared with (MTP)
    drafted: str                     # the target whose budget changes (DFlash2), measured at its own budget first
    own: int                         # its budget as launched (fitted there)
    budgets: tuple[int, ...]         # the other budgets to predict and confirm
    fit_levels: tuple[int, ...]      # [load] concurrency: the levels the twins are fitted from
    low: int                         # the crossover's range: search_min .. search_max
    high: int
    max_runs: int = 1                # runs of a level whose call stays unclear (within the tie band, or too few pairs)
    budget_urls: dict[int, str] = dataclasses.field(default_factory=dict)
    verdict: str = "paired"          # a level's call: paired (the lead prompt by prompt) | medians (tok/s, 3%)
    false_verdict: float = 0.05      # verdict = "paired": a clear call's error rate at the tie band's edges

    @property
    def every_budget(self) -> tuple[int, ...]:
        return (self.own, *self.budgets)

    def name(self, budget: int) -> str:
        """A configuration's name in every run of the campaign (the fit's too, so its steps count for its budget)."""
        return f"{self.drafted}-b{budget}"


def load_job(data: dict, base_dir: Path, source: str) -> tuple[BudgetJob, Experiment]:
    """The job table and the experiment (the file without [job]); every key checked before any load."""
    data = dict(data)
    if "job" not in data:
        raise ConfigError("job", "is required", "add a [job] table: baseline, drafted, budgets")
    t = StrictTable(data.pop("job"), "job", BUDGET_JOB)
    exp = parse_experiment(data, base_dir, source)
    names = [target.name for target in exp.targets]
    baseline, drafted = t.read("baseline"), t.read("drafted")
    for key, name in (("baseline", baseline), ("drafted", drafted)):
        if name not in names:
            raise ConfigError(f"job.{key}", f"{name!r} is not a target", f"use one of {names}")
    budgets = tuple(t.read("budgets"))
    if not budgets or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 2 for v in budgets):
        raise ConfigError("job.budgets", f"must be a list of whole numbers >= 2, got {list(budgets)!r}")
    fit_levels = exp.load.concurrency
    if len(fit_levels) < 2 or exp.load.search is not None:
        raise ConfigError("load.concurrency", "the levels the twins are fitted from: at least 2",
                          "e.g. concurrency = [1, 4, 16]")
    urls = {int(k): str(v) for k, v in t.read("budget_urls").items()}
    target = exp.targets[names.index(drafted)]
    own = t.read("own_budget", own_budget(target))
    if own is None:
        raise ConfigError("job.own_budget", f"{drafted}'s draft budget is not in its flags",
                          "give own_budget = its --speculative-num-draft-tokens")
    job = BudgetJob(baseline, drafted, own, tuple(b for b in budgets if b != own), fit_levels,
                    t.read("search_min"), t.read("search_max"), t.read("max_runs"), urls,
                    t.read("verdict"), t.read("false_verdict"))
    t.done()
    if target.url is not None and set(job.budgets) - set(urls):
        raise ConfigError("job.budget_urls", f"{drafted} is a running server: each budget needs its own",
                          f'give budget_urls = {{ {budgets[0]} = "http://..." }} for every budget')
    if not job.low < job.high:
        raise ConfigError("job.search_max", f"must be above search_min = {job.low}")
    return job, exp


def own_budget(target: TargetConfig) -> int | None:
    """The drafted target's budget as launched (an emulator's --speculative-num-draft-tokens)."""
    args = list(target.emulator_args)
    flag = "--speculative-num-draft-tokens"
    return int(args[args.index(flag) + 1]) if flag in args else None


@contextlib.contextmanager
def servers(exp: Experiment, job: BudgetJob) -> Iterator[dict[str, str]]:
    """url per configuration name: the baseline, and `<drafted>-b<budget>` for every budget (emulators launched
    here, once each)."""
    by_name = {t.name: t for t in exp.targets}
    flag = "--speculative-num-draft-tokens"
    with contextlib.ExitStack() as stack:
        def url_of(target: TargetConfig, budget: int | None = None) -> str:
            if target.url is not None:
                return target.url if budget in (None, job.own) else job.budget_urls[budget]
            args = list(target.emulator_args)
            if budget is not None and flag in args:
                args = args[:args.index(flag)] + args[args.index(flag) + 2:]
            return stack.enter_context(EmulatorProcess(args + ([flag, str(budget)] if budget else []))).url
        urls = {job.baseline: url_of(by_name[job.baseline])}
        urls.update({job.name(b): url_of(by_name[job.drafted], b) for b in job.every_budget})
        yield urls


def measure(exp: Experiment, results: Path, name: str, urls: dict[str, str], levels: list[int],
            log: Callable[[str], None]) -> str:
    """A grid over `levels` of the given url targets (their names as given); its run id."""
    targets = tuple(TargetConfig(n, "auto", u, (), "local", None) for n, u in urls.items())
    step = dataclasses.replace(exp, name=name, targets=targets,
                               load=dataclasses.replace(exp.load, concurrency=tuple(levels), repeats=1, search=None))
    outcome = run_experiment(step, str(results), log=lambda line: None)
    log(f"  measured {name}: C = {', '.join(map(str, levels))} ({outcome.status})")
    return outcome.run_id


def predict_budgets(exp: Experiment, results: Path, job: BudgetJob, twins: dict[str, Path]
                    ) -> tuple[str, dict[str, dict[int, float]]]:
    """A predicted run of the baseline and every budget at every level of the range; tok/s per name and level."""
    drafted = twins[job.drafted]
    refs = {job.baseline: TwinRef(str(twins[job.baseline]))}
    refs.update({job.name(b): TwinRef(str(drafted), draft_tokens=None if b == job.own else b)
                 for b in job.every_budget})
    targets = tuple(TargetConfig(n, "auto", None, (), "local", None, twin=r) for n, r in refs.items())
    levels = tuple(range(job.low, job.high + 1))
    pred = dataclasses.replace(exp, name=f"{exp.name}-predicted", targets=targets, slo=None,
                               load=dataclasses.replace(exp.load, concurrency=levels, repeats=1, search=None))
    run_id = run_predicted(pred, results, log=lambda line: None)
    found = crossover.level_tok_s(results, [run_id], list(refs))
    return run_id, {n: {c: v[0] for c, v in found[n].items()} for n in refs}


def seeded_crossover(exp: Experiment, results: Path, job: BudgetJob, urls: dict[str, str], other: str,
                     start: TwinStart | None, log: Callable[[str], None], campaign: tuple[str, ...] = ()
                     ) -> tuple[float | None, list[str], list[int], list[int]]:
    """The crossover of `other` with the baseline, measured by the search; seeded at the twin's prediction when
    `start` is given, else the usual search from the range's middle. `campaign`: runs measured before (the fit,
    earlier budgets' searches), whose steps count as this search's own. (crossover, run ids, levels probed, ties:
    the levels measured where the two are too close to call)."""
    cfg = SearchConfig(float(job.low), float(job.high), max_runs=job.max_runs,
                       start=float(round(math.sqrt(job.low * job.high))))
    if start is not None:
        cfg = dataclasses.replace(cfg, start=start.level, twin="predicted", seeds=(start,))
    runs: list[str] = []
    probed: list[int] = []
    levels, pairs = (crossover.read_levels(results, list(campaign), job.baseline, other) if campaign
                     else ({job.baseline: {}, other: {}}, {}))
    while (probe := next_probe(cfg, judge(job, other, levels, pairs))) is not None:
        level = int(probe.level)
        log(f"  {other} vs {job.baseline} at C={level}: {probe.reason}")
        side = baseline_needed(levels, job.baseline, other, level)
        names = [job.baseline, other] if side else [other]
        runs.append(measure(exp, results, f"{exp.name}-{other}-c{level}", {n: urls[n] for n in names}, [level], log))
        probed.append(level)
        levels, pairs = crossover.read_levels(results, [*campaign, *runs], job.baseline, other)
    found = judge(job, other, levels, pairs)
    return crossover.crossover(found), runs, probed, [int(c) for c, v in found.items() if not v.clear]


def judge(job: BudgetJob, other: str, levels: dict[str, dict[int, tuple]], pairs: dict[int, list[Pair]]
          ) -> dict[float, Verdict]:
    """Each level's call of `other` against the baseline by the job's rule (loadgen/twin/crossover.py), from
    crossover.read_levels."""
    if job.verdict == "medians":
        return crossover.verdicts(levels, job.baseline, other)
    return crossover.lead_verdicts(levels, pairs, job.baseline, other, job.false_verdict)


def baseline_needed(levels: dict[str, dict[int, tuple]], baseline: str, other: str, level: int) -> bool:
    """Measure the baseline at `level` beside `other` unless it has more steps there than `other` has: a re-run
    of an unclear call compares ranges over as many steps of each (crossover.verdicts)."""
    steps = {name: levels[name].get(level, (0, 0, 0, 0))[3] for name in (baseline, other)}
    return steps[baseline] <= steps[other]


def fit_twins(results: Path, fit_run: str, job: BudgetJob, log: Callable[[str], None]) -> dict[str, Path]:
    """A twin of the baseline and of the drafted target (measured as `<drafted>-b<own>`), keyed by job name."""
    out = {}
    for name, measured_as in ((job.baseline, job.baseline), (job.drafted, job.name(job.own))):
        twin: Twin = fit_twin(read_source(results, fit_run, measured_as))
        path = results / "twins" / f"run_id={fit_run}" / f"{name}.toml"
        path.parent.mkdir(parents=True, exist_ok=True)
        twin.save(path)
        log(f"  twin of {name}: {twin.error.describe() if twin.error else 'no error'} -> {path}")
        if twin.error and (line := twin.error.over_limit()):
            log(f"  twin {name}: {line}")
        out[name] = path
    return out


def tok_s_spread(paths: list[Path]) -> float:
    """The relative tok/s error of a comparison of twins: their leave-one-level-out tok/s errors combined."""
    errors = [load_twin(p).error for p in paths]
    spreads = [e.spread.get("tok_s", 0.0) if e else 0.0 for e in errors]
    return max(MIN_SPREAD, math.sqrt(sum(s * s for s in spreads)))


def describe(c: float | None, low: float, high: float) -> str:
    """`between 8 and 9`, `below 1` (never ahead), `at 32 or above` (ahead at every level)."""
    if c is None:
        return f"never ahead (from C={low:g})"
    if c >= high:
        return f"ahead up to {high:g} (the range's top)"
    return f"between {c:g} and {c + 1:g}"



def step_seconds(results: Path, runs: list[str]) -> tuple[int, float]:
    """(steps, step-seconds) of the measured runs: what the servers were busy with (views.sql step_info.step_s)."""
    if not runs:
        return 0, 0.0
    con = analysis.open_results(results, runs)
    [(steps, seconds)] = con.execute("SELECT count(*), coalesce(sum(step_s), 0) FROM step_info").fetchall()
    con.close()
    return int(steps), float(seconds)


def run_job(config: str, results: str | None, ray_address: str | None, log: Callable[[str], None] = print) -> int:
    """The job end to end; prints the predicted and measured crossover of every budget. Exit code 0."""
    path = Path(config)
    job, exp = load_job(load_toml(path, "--config", "give the job's .toml file"), path.parent.resolve(), config)
    folder = results_folder(results or exp.results)
    check_writable(folder)
    ray_setup.connect(ray_address)
    log(f"loadgen draft-budget twin job: {job.drafted} at budgets {', '.join(map(str, job.every_budget))} vs "
        f"{job.baseline}, C = {job.low}..{job.high} -> {folder}")
    with servers(exp, job) as urls:
        log(f"1. measure {job.baseline} and {job.name(job.own)} at C = {', '.join(map(str, job.fit_levels))}")
        fit_run = measure(exp, folder, f"{exp.name}-fit", {job.baseline: urls[job.baseline],
                                                           job.name(job.own): urls[job.name(job.own)]},
                          list(job.fit_levels), log)
        log("2. fit a twin of each")
        twins = fit_twins(folder, fit_run, job, log)
        log(f"3. predict every budget at C = {job.low}..{job.high} (virtual time)")
        pred_run, tok = predict_budgets(exp, folder, job, twins)
        spread = tok_s_spread(list(twins.values()))
        log(predicted_table(tok, job))
        rule = (f"each level's lead read prompt by prompt, a clear call wrong at most {100 * job.false_verdict:g}% "
                f"of the time at a {crossover.CLEAR_PCT:g}% difference" if job.verdict == "paired" else
                f"each level by its median tok/s, a {crossover.CLEAR_PCT:g}% difference called from one step")
        log(f"4. confirm each crossover with the twin-seeded search (interval: the twins' tok/s error "
            f"{100 * spread:.0f}%; {rule})")
        rows = []
        campaign = [fit_run]
        for b in job.every_budget:
            name = job.name(b)
            c, lo, hi = crossover.predicted_crossover(tok[name], tok[job.baseline], spread)
            seed = TwinStart(name, c if c is not None else job.low, lo if lo is not None else job.low,
                             hi if hi is not None else (c if c is not None else job.low), "predicted crossover")
            measured, runs, probed, ties = seeded_crossover(exp, folder, job, urls, name, seed, log,
                                                            tuple(campaign))
            campaign += runs
            rows.append((b, c, lo, hi, (measured, ties), probed, *step_seconds(folder, runs)))
    fit_steps = step_seconds(folder, [fit_run])
    log(summary(rows, job, fit_steps, pred_run, folder))
    return 0


def predicted_table(tok: dict[str, dict[int, float]], job: BudgetJob) -> str:
    names = [job.baseline, *(job.name(b) for b in job.every_budget)]
    lines = ["PREDICTED aggregate tok/s (twins, virtual time):", "    C  " + "  ".join(f"{n:>12s}" for n in names)]
    for c in sorted(tok[job.baseline]):
        lines.append(f"  {c:3d}  " + "  ".join(f"{tok[n].get(c, math.nan):12.1f}" for n in names))
    return "\n".join(lines)


def summary(rows: list[tuple], job: BudgetJob, fit: tuple[int, float], pred_run: str, results: Path) -> str:
    """Where the crossover lies per budget, predicted and measured, what each answer cost, and where it moves."""
    lines = [f"\ncrossover with {job.baseline} (the highest C where {job.drafted} leads in aggregate tok/s):",
             f"  {'budget':>6s}  {'PREDICTED (interval)':36s}  {'measured':28s}  probes (C)            steps  step-s"]
    for b, c, lo, hi, (measured, _), probed, steps, seconds in rows:
        interval = f"{describe(c, job.low, job.high)} ({_bound(lo)} .. {_bound(hi)})"
        lines.append(f"  {b:6d}  {interval:36s}  {describe(measured, job.low, job.high):28s}  "
                     f"{','.join(map(str, probed)):20s}  {steps:5d}  {seconds:6.1f}")
    if ties := [f"budget {b} at C = {', '.join(map(str, sorted(t)))}" for b, _, _, _, (_, t), *_ in rows if t]:
        why = (f"within {crossover.CLEAR_PCT:g}%, a tie" if job.verdict == "medians" else
               f"no call at {100 * job.false_verdict:g}% false verdicts: a tie within {crossover.CLEAR_PCT:g}%, or "
               f"too few prompts to tell")
        lines.append(f"  too close to call ({why}; decided by the point estimate): " + "; ".join(ties))
    own = next(r for r in rows if r[0] == job.own)
    for b, c, _, _, (measured, _), *_ in rows:
        if b != job.own:
            lines.append(f"  budget {job.own} -> {b}: the crossover moves {_move(own[1], c)} predicted, "
                         f"{_move(own[4][0], measured)} measured")
    total_steps = fit[0] + sum(r[6] for r in rows)
    total_s = fit[1] + sum(r[7] for r in rows)
    lines.append(f"  cost: fit {fit[0]} steps {fit[1]:.0f} s + confirming {total_steps - fit[0]} steps "
                 f"{total_s - fit[1]:.0f} s = {total_steps} steps, {total_s:.0f} step-seconds measured")
    lines.append(f"  the prediction: run {pred_run}; loadgen query twin_error --results {results} "
                 f"--set predicted_run={pred_run}")
    return "\n".join(lines)


def _bound(value: float | None) -> str:
    return "never ahead" if value is None else f"{value:g}"


def _move(before: float | None, after: float | None) -> str:
    if before == after:
        return "nowhere"
    if before is None or after is None:
        return f"from {_bound(before)} to {_bound(after)}"
    return f"{'right' if after > before else 'left'} ({before:g} -> {after:g})"
