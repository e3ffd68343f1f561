"""Prompt sources and seeded mixes: what the load asks the model (see prompts/README in the docs)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Prompt:
    """One prompt. Exactly one of `text` (completion routes) or `messages` (chat routes) is set;
    adapters convert between them when a route needs the other form."""

    prompt_id: str
    kind: str          # code | prose | ... : flows into requests.prompt_kind
    template: str      # which task template or dataset produced it: requests.template
    text: str | None = None
    messages: tuple[dict, ...] | None = None
    target_tokens: int | None = None   # the input length asked for (prompts.input_tokens), in the server's tokens
    max_new_tokens: int | None = None  # its own output length (a trace row's); None: prompts.max_new_tokens
    session_id: str | None = None      # the session a trace row belongs to (requests.session_id)
