"""Stop signals: SIGINT (Ctrl-C) and SIGTERM (`ray job stop`) ask the run to stop; they never interrupt what runs.

The handlers only note the first signal and what the run was doing (`during`). The run acts on it at its own
safe points: `check`, and the waits `sleep` and `get`, which give up within POLL_S of a signal. There `Stopped`
is raised: the step that was running is cut and written, the servers are stopped, the run row says `incomplete`
with the reason, and the entry points exit with 128 + the signal (130 for SIGINT, 143 for SIGTERM). So a signal
that lands in a DuckDB query, a Parquet write or Ray's start-up lets that call finish: a handler that raised
turned into `RuntimeError: Query interrupted` inside DuckDB and into a SystemError inside `ray.get`.

SIGINT is left ignored when the process started with it ignored: POSIX shells start the background jobs of a
non-interactive script so, on purpose, that a Ctrl-C at the terminal does not reach them. A blocked one is
unblocked: Ray blocks SIGINT in its processes, and the driver of a `ray job submit` inherits that. A second signal
does not interrupt the clean-up (seconds); SIGKILL ends the driver at once, and `--resume` continues the run.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import FrameType
from typing import Any

from loadgen.clock import now_ns

POLL_S = 0.1              # how soon a wait notices a stop signal
SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Stopped(BaseException):
    """Raised at a safe point of the run after a stop signal. A BaseException, like KeyboardInterrupt: no
    `except Exception` on its way out keeps the run going."""

    def __init__(self, signum: int, where: str) -> None:
        super().__init__(f"received {signal.Signals(signum).name} during {where}")
        self.signum = signum
        self.run_id: str | None = None   # set by the run it stopped (None: stopped before a run existed)

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    def message(self, resumable: bool) -> str:
        """What an entry point prints (the resume on a line of its own: a run id is long); `resumable`: it takes
        --resume RUN_ID."""
        if self.run_id is None:
            return f"run stopped ({self}) before it began; nothing was measured"
        return f"run stopped ({self}); what was measured is kept" + (
            f"\ncontinue it with --resume {self.run_id}" if resumable else "")


_previous: dict[int, Any] = {}    # signal -> the handler ours replaced, while ours are installed
_blocked: set[int] = set()        # the signals install() unblocked
_received: int | None = None      # the first stop signal
_where = ""                       # what the run was doing when it came
_phase = "start-up"               # what the run is doing now
_marks: Sequence[tuple[int, str]] = ()   # (t_ns, phase from then on): a step's warm-up, window and drain


def install() -> bool:
    """Put our handlers on SIGTERM, and on SIGINT unless it has been ignored since the process started; a no-op
    when they are in place or off the main thread (Python runs handlers there only). True if this call did it.
    In place but replaced since (a `ray.init` outside `kept`, e.g. a second run in one process): ours again."""
    global _received, _where
    if threading.current_thread() is not threading.main_thread():
        return False
    if _previous:
        for sig in _previous:
            if signal.getsignal(sig) is not _on_signal:
                signal.signal(sig, _on_signal)
        return False
    _received, _where = None, ""
    during("start-up")
    for sig in SIGNALS:
        if sig == signal.SIGINT and signal.getsignal(sig) == signal.SIG_IGN:
            continue
        _previous[sig] = signal.signal(sig, _on_signal)
    _blocked.update(signal.pthread_sigmask(signal.SIG_UNBLOCK, _previous) & set(_previous))
    return True


@contextmanager
def handling() -> Iterator[None]:
    """Our handlers for the block when the process has none yet (the run called as a library, e.g. by tests),
    the previous ones back after it. The entry points `install` them for the whole process instead."""
    if not install():
        yield
        return
    try:
        yield
    finally:
        uninstall()


def uninstall() -> None:
    """The handlers ours replaced back, the signals install() unblocked blocked again, no stop noted: the end of
    `handling`, and between the runs of a process that runs many (the tests call the entry points in theirs)."""
    global _received, _where
    for sig, previous in _previous.items():
        signal.signal(sig, previous)
    _previous.clear()
    signal.pthread_sigmask(signal.SIG_BLOCK, _blocked)
    _blocked.clear()
    _received, _where = None, ""


@contextmanager
def kept() -> Iterator[None]:
    """Keep our handlers through `ray.init`, which installs its own: in Python, SIGTERM exits at once (a local
    cluster's node kills its processes and exits 1), so a stop during Ray's start-up ended the driver with Ray's
    exit code and no run row; natively, a failure handler that prints a stack dump for SIGTERM, and the driver
    then aborted at exit. The Python ones are refused for the call (the same scoped patch of `signal.signal` as
    Ray's own DeferSigint); ours are installed again after it, over the native one."""
    if not _previous:
        yield
        return
    original = signal.signal

    def keep(signum: int, handler: Any) -> Any:
        return signal.getsignal(signum) if signum in _previous else original(signum, handler)
    signal.signal = keep   # type: ignore[assignment]
    try:
        yield
    finally:
        signal.signal = original
        for sig in _previous:
            signal.signal(sig, _on_signal)


def _on_signal(signum: int, frame: FrameType | None) -> None:
    """Note the first stop signal and where the run was; nothing else, so that nothing running is interrupted."""
    global _received, _where
    if _received is None:
        _received, _where = signum, phase()


def during(now: str, then: Sequence[tuple[int, str]] = ()) -> None:
    """Say what the run is doing (`bring-up`, `the warm-up of step 2`), and `then` what it does from which instant
    on (a step's window and drain come by the clock): a stop's reason names where it landed."""
    global _phase, _marks
    _phase, _marks = now, then


def phase() -> str:
    t = now_ns()
    return next((name for t_from, name in reversed(_marks) if t >= t_from), _phase)


def requested() -> bool:
    return _received is not None


def check() -> None:
    """Raise Stopped if a stop signal came: called where the run can stop cleanly."""
    if _received is not None:
        raise Stopped(_received, _where)


def sleep(seconds: float) -> None:
    """time.sleep that ends with Stopped within POLL_S of a stop signal."""
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        check()
        time.sleep(min(left, POLL_S))
    check()


def get(refs: Any, timeout_s: float | None = None) -> Any:
    """ray.get for the run's long waits (a server starting, calibration requests): Stopped within POLL_S of a
    stop signal, GetTimeoutError after `timeout_s` as ray.get raises it."""
    import ray  # here, not at the top: the entry points install the handlers before Ray's slow import
    pending = refs if isinstance(refs, list) else [refs]
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        check()
        _, waiting = ray.wait(pending, num_returns=len(pending), timeout=POLL_S)
        if not waiting:
            return ray.get(refs)
        if deadline is not None and time.monotonic() >= deadline:
            raise ray.exceptions.GetTimeoutError(f"not ready within {timeout_s:g} s")

