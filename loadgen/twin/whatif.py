"""A twin target: its file, with what the experiment changes in it (a what-if). The twin's fitted numbers stay; what
a what-if changes is what the server would have been launched with (docs/twin.md: what a twin is not)."""

from __future__ import annotations

import dataclasses

from loadgen.config.targets import TwinRef
from loadgen.twin.model import Twin, load_twin


def load_target(ref: TwinRef, key: str) -> Twin:
    """The twin of `ref` with its overrides applied; ConfigError (on `key`) for a bad file or override."""
    twin = load_twin(ref.profile, f"{key}.profile")
    server = twin.server
    if ref.algorithm_from is not None:
        other = load_twin(ref.algorithm_from, f"{key}.algorithm_from")
        server = dataclasses.replace(other.server, max_running=server.max_running,
                                     max_prefill_tokens=server.max_prefill_tokens)
        twin = dataclasses.replace(twin, algorithm=other.algorithm)
    if ref.draft_tokens is not None:
        server = server.with_draft_tokens(ref.draft_tokens, f"{key}.draft_tokens")
    if ref.max_running_requests is not None:
        server = dataclasses.replace(server, max_running=ref.max_running_requests)
    if ref.kv_pool_tokens is not None:
        server = dataclasses.replace(server, kv_pool_tokens=ref.kv_pool_tokens)
    return dataclasses.replace(twin, server=server, what_if=ref.what_if())
