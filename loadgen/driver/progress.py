"""The driver's one voice while steps run: what the workers report (`WorkerProgress`, polled by the window loop
in window.py) shown as one line per step, so that the output stays short whatever the number of workers.

On a terminal a step has one live line, redrawn in place (targets side by side: requests done, in flight,
output tok/s so far), that becomes the step's summary when it ends. In a log (a file, `ray job logs`, CI) the
step's first line, its summary, and in between, once it has run LOG_FIRST_S, a progress line at most every
LOG_EVERY_S: a step of a usual sweep (warm-up and window in seconds) takes two lines, a long one says how far it
is (with a line at 15 s as well, the main job's six steps took 25 of its 47 lines). Workers print nothing.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TextIO

from loadgen.client.messages import WorkerProgress
from loadgen.clock import now_ns
from loadgen.driver.livemetrics import StepLive
from loadgen.driver.tally import Tally, tallies, target_of
from loadgen.plan.steps import TargetLoad
from loadgen.values import WIDTH, counted, fitted

REDRAW_S = 0.5        # on a terminal: the live line's redraw period
LOG_EVERY_S = 15.0    # in a log: a step's progress line at most this often
LOG_FIRST_S = 30.0    # in a log: a step's first progress line once it has run this long
LOG_WIDTH = WIDTH     # a progress line in a log is cut to this many characters
NAMED_TARGETS = 4     # a step's label names up to this many targets; more are counted
EARLY_STOP = ("although ignore_eos was sent: it ignores ignore_eos, so outputs are shorter than asked (loadgen query "
              "workload_check; or run with --no-ignore-eos / prompts.ignore_eos = false)")


def grouped(what: str, said: Iterable[tuple[str, str]]) -> list[str]:
    """`target a: <text>` per target, or `targets a, b, c: <text>` for those that say the same: a fleet's nodes
    at one configuration take one line, not one each."""
    names: dict[str, list[str]] = {}
    for name, text in said:
        names.setdefault(text, []).append(name)
    return [fitted(f"{what} {who[0]}: {text}" if len(who) == 1 else f"{what}s {', '.join(who)}: {text}")
            for text, who in names.items()]


class Console:
    """The driver's output: permanent lines through `log`; on a terminal also one live line under them, cleared
    before a permanent line is printed and drawn again after it."""

    def __init__(self, log: Callable[[str], None], terminal: TextIO | None = None, width: int | None = None) -> None:
        self.log = log
        self.terminal = terminal
        self.fixed_width = width
        self.live_text = ""
        self.warned: set[str] = set()   # targets whose early stops were said (once per run)

    @property
    def width(self) -> int:
        if self.fixed_width is not None:
            return self.fixed_width
        return shutil.get_terminal_size().columns - 1 if self.terminal is not None else LOG_WIDTH

    def line(self, text: str) -> None:
        """A permanent line (the runner's `log`)."""
        self._clear()
        self.log(text)
        self._draw()

    def live(self, text: str) -> None:
        """Redraw the live line (a terminal only)."""
        self.live_text = text
        self._draw()

    def end_live(self) -> None:
        self._clear()
        self.live_text = ""

    def close(self) -> None:
        """A live line still up (a step that raised) stays on screen; what follows starts on a line of its own."""
        if self.terminal is not None and self.live_text:
            self.terminal.write("\n")
            self.terminal.flush()
        self.live_text = ""

    def _clear(self) -> None:
        if self.terminal is not None and self.live_text:
            self.terminal.write("\r\x1b[K")
            self.terminal.flush()

    def _draw(self) -> None:
        if self.terminal is not None and self.live_text:
            self.terminal.write("\r" + self.live_text[:self.width] + "\x1b[K")
            self.terminal.flush()


def progress_text(seconds: float, found: list[Tally], width: int) -> str:
    """`12 s: mtp 8 done, 4 in flight, 67 tok/s | dflash2 ...`; when the targets do not fit side by side, their
    sums and the slowest and fastest target (a fleet)."""
    text = f"{seconds:.0f} s: " + " | ".join(t.text(seconds) for t in found)
    if len(text) <= width or len(found) < 2:
        return text
    total = Tally(counted(len(found), "target"), sum(t.done for t in found), sum(t.in_flight for t in found),
                  sum(t.failed for t in found), sum(t.tokens for t in found))
    slow, fast = min(found, key=lambda t: t.tokens), max(found, key=lambda t: t.tokens)
    return (f"{seconds:.0f} s: {total.text(seconds)}; slowest {slow.target} {slow.tokens / max(seconds, 1e-9):.0f}, "
            f"fastest {fast.target} {fast.tokens / max(seconds, 1e-9):.0f} tok/s")


def step_label(name: str, loads: tuple[TargetLoad, ...], repeat: int | None) -> str:
    """`[step 3/6] C=8 targets a,b repeat 0`, each target's own level when they differ (a search) with why it was
    chosen; past NAMED_TARGETS targets they are counted, not named (a fleet)."""
    again = "" if repeat is None else f" repeat {repeat}"
    if len({(load.level, load.probe) for load in loads}) == 1:
        why = f" ({loads[0].probe})" if loads[0].probe else ""
        names = (f"targets {','.join(load.target for load in loads)}" if len(loads) <= NAMED_TARGETS
                 else counted(len(loads), "target"))
        return f"{name} {loads[0].describe()}{why} {names}{again}"
    if len(loads) > NAMED_TARGETS:
        return f"{name} {counted(len(loads), 'target')}, each at its own level"
    return f"{name} " + "; ".join(f"{load.target} {load.describe()}" + (f" ({load.probe})" if load.probe else "")
                                  for load in loads)


@dataclass(frozen=True)
class Extension:
    """A closed-loop window the driver held open past measure_s to hold enough measured requests."""

    target: str
    window_s: float
    needs: int
    at_max: bool      # it reached max_measure_s first


class StepProgress:
    """One step's voice: its first line, its progress (a live line, or a line every LOG_EVERY_S), its summary."""

    def __init__(self, console: Console, name: str, label: str, targets: list[str], t_start_ns: int,
                 clock: Callable[[], int] = now_ns, metrics: StepLive | None = None) -> None:
        self.console, self.name, self.label, self.targets = console, name, label, targets
        self.metrics = metrics   # the live metrics (loadgen.driver.livemetrics), exported as the workers are polled
        self.t_start_ns = t_start_ns
        self.clock = clock
        self.live = console.terminal is not None
        self.period_ns = int((REDRAW_S if self.live else LOG_EVERY_S) * 1e9)
        self.next_ns = clock() + (self.period_ns if self.live else int(LOG_FIRST_S * 1e9))
        self.seen: dict[str, WorkerProgress] = {}
        self.extensions: list[Extension] = []

    def begin(self, plan: str) -> None:
        """`[step 3/6] C=8 targets a,b repeat 0: warm-up 3 s, measure 10 s`: permanent in a log, live on a terminal."""
        text = f"{self.label}: {plan}"
        if self.live:
            self.console.live(text)
        else:
            self.console.line(fitted(text))

    def due(self) -> bool:
        """Time for the next redraw, progress line or live metrics export (the window loop polls the workers
        only then)."""
        return self.clock() >= self.next_ns or self.metrics is not None and self.metrics.due()

    def show(self, seen: Iterable[WorkerProgress]) -> None:
        """Take the workers' latest progress; export and draw it when due. A target's first early stop is said at
        once."""
        for p in seen:
            self.seen[p.worker] = p
        self._warn_early_stops()
        if self.metrics is not None and self.metrics.due():
            self.metrics.export(self._tallies(), self._seconds())
        if self.clock() < self.next_ns:
            return
        now = self.clock()
        self.next_ns = now + self.period_ns
        seconds = max(now - self.t_start_ns, 0) / 1e9
        if self.live:   # the label, or only the step's number when the targets would not fit beside it
            found, width = self._tallies(), self.console.width
            side_by_side = progress_text(seconds, found, 10**6)
            head = f"{self.label}: " if len(self.label) + 2 + len(side_by_side) <= width else f"{self.name} "
            self.console.live(head + progress_text(seconds, found, width - len(head)))
        else:
            self.console.line("  " + progress_text(seconds, self._tallies(), self.console.width - 2))

    def final(self, seen: Iterable[WorkerProgress]) -> None:
        """The workers' progress once their step has stopped: the live metrics' last export of the step."""
        for p in seen:
            self.seen[p.worker] = p
        if self.metrics is not None:
            self.metrics.export(self._tallies(), self._seconds())

    def _seconds(self) -> float:
        return max(self.clock() - self.t_start_ns, 0) / 1e9

    def extended(self, extension: Extension) -> None:
        self.extensions.append(extension)

    def end(self, outcome: str) -> None:
        """The step's summary, in place of the live line: `[step 3/6] done in 18.3 s: 22 ok, ...`."""
        self.console.end_live()
        head = f"{self.label}:" if self.live else self.name
        self.console.line(fitted(f"{head} {outcome}{self._extension_text()}"))

    def _tallies(self) -> list[Tally]:
        return tallies(self.targets, self.seen.values())

    def _extension_text(self) -> str:
        """`; window extended to hold 16 measured requests: mtp 10.9 s, dflash2 13.7 s` (a range past
        NAMED_TARGETS targets); `(max_measure_s reached)` when one stopped there."""
        found = self.extensions
        if not found:
            return ""
        needs = sorted({e.needs for e in found})
        held = f"{needs[0]}" if len(needs) == 1 else f"{needs[0]}-{needs[-1]}"
        if len(found) <= NAMED_TARGETS:
            where = ", ".join(f"{e.target} {e.window_s:.1f} s" for e in found)
        else:
            where = (f"{counted(len(found), 'target')} {min(e.window_s for e in found):.1f}-"
                     f"{max(e.window_s for e in found):.1f} s")
        maxed = " (max_measure_s reached)" if any(e.at_max for e in found) else ""
        return f"; window extended to hold {held} measured requests: {where}{maxed}"

    def _warn_early_stops(self) -> None:
        new = {target_of(p.worker): p.early_stop for p in self.seen.values()
               if p.early_stop and target_of(p.worker) not in self.console.warned}
        if not new:
            return
        self.console.warned |= new.keys()
        (first, example), more = next(iter(new.items())), len(new) - 1
        who = f"target {first}" + (f" (and {counted(more, 'other target')} alike)" if more else "")
        self.console.line(f"warning: {who}: {example} {EARLY_STOP}")
