"""The driver's one voice: what a step prints while it runs, from the workers' typed progress. On a terminal one
live line, redrawn in place, that ends as the step's summary; in a log the step's first line, a progress line at
most every 15 s and the summary; a fleet's steps take no more lines than a single target's."""

from __future__ import annotations

import io
import re

from loadgen.client.messages import WorkerProgress
from loadgen.driver.progress import LOG_EVERY_S, LOG_FIRST_S, REDRAW_S, Console, Extension, StepProgress, step_label
from loadgen.plan.steps import TargetLoad

S = 1_000_000_000


class Clock:
    """The step's time line, advanced by the test (the display reads it through its `clock` argument)."""

    def __init__(self) -> None:
        self.t = 0

    def __call__(self) -> int:
        return self.t


def screen(raw: str) -> list[str]:
    """What a terminal shows after `raw`: a carriage return goes back to the line's start, ESC[K clears the rest
    of the line, a newline starts the next line."""
    lines, line, col = [], "", 0
    for part in re.split(r"(\r|\n|\x1b\[K)", raw):
        if part == "\r":
            col = 0
        elif part == "\n":
            lines.append(line)
            line, col = "", 0
        elif part == "\x1b[K":
            line = line[:col]
        else:
            line = line[:col] + part + line[col + len(part):]
            col += len(part)
    return lines + ([line] if line else [])


def run_step(progress: StepProgress, clock: Clock, targets: list[str], seconds: float, workers: int = 2,
             tok_s: float = 10.0, poll_s: float = 0.2) -> None:
    """Poll like the window loop until `seconds` into the step: each worker has finished one request a second
    and holds 4 in flight; its tokens grow by `tok_s` a second."""
    for i in range(round(clock.t / S / poll_s), round(seconds / poll_s)):
        clock.t = int((i + 1) * poll_s * S)
        now = clock.t / S
        progress.show([WorkerProgress(f"{t}.w{w}", in_flight=4, outcomes={"ok": int(now)}, tokens=int(tok_s * now))
                       for t in targets for w in range(workers)])


def test_a_log_gets_the_first_line_a_line_every_15_s_from_30_s_and_the_summary():
    lines: list[str] = []
    clock = Clock()
    step = StepProgress(Console(lines.append), "[step 2/6]", "[step 2/6] C=8 targets mtp,dflash2 repeat 0",
                        ["mtp", "dflash2"], 0, clock)
    step.begin("warm-up 3 s, measure 10 s")
    run_step(step, clock, ["mtp", "dflash2"], 70.0)
    step.extended(Extension("mtp", 10.9, 16, False))
    step.end("done in 70.0 s: 8 cut at step end (drain), 140 ok")
    assert lines[0] == "[step 2/6] C=8 targets mtp,dflash2 repeat 0: warm-up 3 s, measure 10 s"
    assert LOG_FIRST_S == 30 and LOG_EVERY_S == 15 and len(lines) == 5     # at 30, 45 and 60 s
    # two workers per target, each 1 request a second, 4 in flight, 10 tok/s: the target's sums side by side
    assert lines[1] == "  30 s: mtp 60 done, 8 in flight, 20 tok/s | dflash2 60 done, 8 in flight, 20 tok/s"
    assert lines[2].startswith("  45 s: mtp 90 done, 8 in flight, 20 tok/s | dflash2 90 done")
    assert lines[3].startswith("  60 s: mtp 120 done")
    assert lines[-1] == ("[step 2/6] done in 70.0 s: 8 cut at step end (drain), 140 ok; window extended to hold 16 "
                         "measured requests: mtp 10.9 s")
    assert not any("\r" in line or "\x1b" in line for line in lines)


def test_a_step_shorter_than_30_s_is_two_lines_in_a_log():
    lines: list[str] = []
    clock = Clock()
    step = StepProgress(Console(lines.append), "[step 1/6]", "[step 1/6] C=1 targets a", ["a"], 0, clock)
    step.begin("warm-up 3 s, measure 10 s")
    run_step(step, clock, ["a"], LOG_FIRST_S - 1)
    step.end("done in 29.0 s: 1 cut at step end (drain), 28 ok")
    assert lines == ["[step 1/6] C=1 targets a: warm-up 3 s, measure 10 s",
                     "[step 1/6] done in 29.0 s: 1 cut at step end (drain), 28 ok"]


def test_a_terminal_gets_one_live_line_per_step_that_ends_as_its_summary():
    term = io.StringIO()
    clock = Clock()
    console = Console(lambda text: term.write(text + "\n"), term, width=120)
    console.line("run r: 2 steps over 2 targets")
    label = "[step 1/2] C=4 targets a,b repeat 0"
    step = StepProgress(console, "[step 1/2]", label, ["a", "b"], 0, clock)
    step.begin("warm-up 3 s, measure 10 s")
    run_step(step, clock, ["a", "b"], 6.0)
    seen_mid_step = screen(term.getvalue())
    console.line("  server b restarted after 1 death")     # a permanent line while the live line is up
    run_step(step, clock, ["a", "b"], 12.0)
    step.end("done in 12.0 s: 4 cut at step end (drain), 24 ok")
    assert seen_mid_step == ["run r: 2 steps over 2 targets",
                             f"{label}: 6 s: a 12 done, 8 in flight, 20 tok/s | b 12 done, 8 in flight, 20 tok/s"]
    assert screen(term.getvalue()) == ["run r: 2 steps over 2 targets", "  server b restarted after 1 death",
                                       f"{label}: done in 12.0 s: 4 cut at step end (drain), 24 ok"]
    redraws = term.getvalue().count("\r") - term.getvalue().count("\r\x1b[K")
    polls = 12 / 0.2
    assert 12 / (REDRAW_S + 0.2) <= redraws <= 12 / REDRAW_S + 3 < polls   # every REDRAW_S, not at every poll


def test_a_step_that_raised_leaves_its_live_line_and_what_follows_on_a_line_of_its_own():
    term = io.StringIO()
    clock = Clock()
    console = Console(lambda text: term.write(text + "\n"), term, width=120)
    step = StepProgress(console, "[step 1/2]", "[step 1/2] C=4 targets a", ["a"], 0, clock)
    step.begin("warm-up 3 s, measure 10 s")
    run_step(step, clock, ["a"], 2.0)
    console.close()                     # the runner's finally, before the error is printed
    term.write("error: results folder cannot be written\n")
    live, error = screen(term.getvalue())
    assert re.fullmatch(r"\[step 1/2\] C=4 targets a: \d s: a \d+ done, 8 in flight, 20 tok/s", live), live
    assert error == "error: results folder cannot be written"


def test_a_narrow_terminal_keeps_the_targets_side_by_side_before_the_label_then_sums_them():
    shown = {}
    for width in (130, 100, 60):
        term = io.StringIO()
        clock = Clock()
        step = StepProgress(Console(lambda text, out=term: out.write(text + "\n"), term, width=width), "[step 1/6]",
                            "[step 1/6] C=4 targets mtp,dflash2 repeat 0", ["mtp", "dflash2"], 0, clock)
        run_step(step, clock, ["mtp", "dflash2"], 2.0)
        [shown[width]] = screen(term.getvalue())
        assert len(shown[width]) <= width
    assert shown[130] == ("[step 1/6] C=4 targets mtp,dflash2 repeat 0: 2 s: mtp 2 done, 8 in flight, 20 tok/s | "
                          "dflash2 2 done, 8 in flight, 20 tok/s")
    assert shown[100] == "[step 1/6] 2 s: mtp 2 done, 8 in flight, 20 tok/s | dflash2 2 done, 8 in flight, 20 tok/s"
    assert shown[60].startswith("[step 1/6] 2 s: 2 targets 4 done, 16 in flight, 40 tok/s")


def test_a_fleet_of_20_targets_takes_as_many_lines_as_one_target():
    fleet = [f"spark{i}.{alg}" for i in range(1, 11) for alg in ("mtp", "dflash")]
    loads = tuple(TargetLoad(t, 8) for t in fleet)
    label = step_label("[step 1/6]", loads, 0)
    assert label == "[step 1/6] C=8 20 targets repeat 0"
    out: dict[str, list[str]] = {}
    for name, targets in (("one", ["mtp"]), ("fleet", fleet)):
        lines = out[name] = []
        clock = Clock()
        step = StepProgress(Console(lines.append), "[step 1/6]", label, targets, 0, clock)
        step.begin("warm-up 3 s, measure 10 s")
        run_step(step, clock, targets, 40.0)
        for t in targets:
            step.extended(Extension(t, 10.5 + targets.index(t) / 10, 16, False))
        step.end("done in 40.0 s: 80 ok")
    assert len(out["fleet"]) == len(out["one"]) == 3
    assert all(len(line) <= 120 for text in out["fleet"] for line in text.splitlines())
    # too many to stand side by side: the sums, and the slowest and fastest target
    assert out["fleet"][1] == ("  30 s: 20 targets 1200 done, 160 in flight, 400 tok/s; slowest spark1.mtp 20, "
                               "fastest spark1.mtp 20 tok/s")
    assert out["fleet"][-1].endswith("window extended to hold 16 measured requests: 20 targets 10.5-12.4 s")


def test_a_search_names_each_targets_level_and_why():
    loads = (TargetLoad("k6", 8, probe="double after pass"), TargetLoad("k4", 4, probe="bisect 2-8"))
    assert step_label("[step 3]", loads, None) == "[step 3] k6 C=8 (double after pass); k4 C=4 (bisect 2-8)"
    assert step_label("[step 1]", (TargetLoad("a", 2, rate=1.5),), 1) == "[step 1] rate=1.5/s targets a repeat 1"


def test_an_early_stop_is_said_once_per_target_for_the_run():
    lines: list[str] = []
    console = Console(lines.append)
    for step_no in (1, 2):
        step = StepProgress(console, f"[step {step_no}]", f"[step {step_no}] C=1 targets a,b,c", ["a", "b", "c"], 0,
                            Clock())
        step.show([WorkerProgress("a.w0", early_stop="llama.cpp ended request r-3 with 'stop' after 12 of 96 tokens"),
                   WorkerProgress("b.w0", early_stop="llama.cpp ended request r-9 with 'stop' after 40 of 96 tokens"),
                   WorkerProgress("c.w0")])
    [warning] = [line for line in lines if line.startswith("warning:")]
    assert warning.startswith("warning: target a (and 1 other target alike): llama.cpp ended request r-3 with "
                              "'stop' after 12 of 96 tokens although ignore_eos was sent")
