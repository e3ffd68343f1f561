"""Errors that reach the user: each names what is wrong and how to fix it."""

from __future__ import annotations


class LoadgenError(Exception):
    """A problem the user can fix; the CLI prints it without a traceback and exits non-zero."""


class ConfigError(LoadgenError):
    """An experiment/fleet file or flag is wrong. `key` is the dotted path of the offending setting."""

    def __init__(self, key: str, problem: str, fix: str = "") -> None:
        self.key, self.problem, self.fix = key, problem, fix
        message = f"{key}: {problem}"
        if fix:
            message += f" (fix: {fix})"
        super().__init__(message)


class TargetError(LoadgenError):
    """A target server is unreachable or does not speak the expected protocol; raised before any load."""


def user_message(exc: LoadgenError) -> str:
    """The one line to print for a user error. One raised inside a Ray actor reaches the driver wrapped with
    the remote traceback in its text; the original error (`cause`) has just the message."""
    cause = getattr(exc, "cause", None)
    return str(cause if isinstance(cause, LoadgenError) else exc)
