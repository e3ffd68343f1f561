"""Bad input beyond the experiment file (tests/unit/test_config.py has 49 of those): CLI flags, results folders,
query run ids, prompt files. Each is refused before any load with a message naming the key/value and the fix."""

from __future__ import annotations

import socket
import threading

import pytest

from loadgen import cli


@pytest.fixture
def listener():
    """A loopback port that counts connections: any load sent to it would show up here."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    sock.settimeout(0.2)
    accepted: list[int] = []
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
                accepted.append(1)
                conn.close()
            except OSError:
                pass
    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{sock.getsockname()[1]}", accepted
    stop.set()
    thread.join()
    sock.close()


RUN_FLAGS = [  # (extra flags, the flag the message must name, a word of the problem)
    (["--concurrency", "0"], "--concurrency", ">= 1"),
    (["--concurrency", "-4"], "--concurrency", ">= 1"),
    (["--concurrency", "2", "2"], "--concurrency", "twice"),
    (["--requests", "0"], "--requests", ">= 1"),
    (["--max-tokens", "0"], "--max-tokens", ""),
    (["--workers", "0"], "--workers", ">= 1"),
    (["--stall-timeout", "0"], "--stall-timeout", "> 0"),
    (["--stall-timeout", "nan"], "--stall-timeout", "finite"),
    (["--request-timeout", "-1"], "--request-timeout", "> 0"),
    (["--error-budget", "-2"], "--error-budget", "whole number"),
    (["--error-budget", "1.5"], "--error-budget", "share below 1"),
    (["--name", "../etc"], "--name", "safe name"),
    (["--name", "a'b"], "--name", "safe name"),
    (["--flavor", "vllm"], "--flavor", "unknown flavor"),
]


@pytest.mark.parametrize("extra,flag,problem", RUN_FLAGS, ids=[" ".join(f[0]) for f in RUN_FLAGS])
def test_bad_run_flags_rejected_before_any_load(extra, flag, problem, listener, capsys, tmp_path):
    url, accepted = listener
    argv = ["run", "--url", url, "--concurrency", "2", "--requests", "4", "--results", str(tmp_path / "r")]
    for i in range(0, len(extra)):   # a flag given again replaces the default above
        if extra[i] in argv and extra[i].startswith("--"):
            j = argv.index(extra[i])
            del argv[j:j + 2]
    code = cli.main(argv + extra)
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(f"error: {flag}") and problem in err, err
    assert not accepted and not (tmp_path / "r").exists()
