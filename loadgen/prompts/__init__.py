"""Prompt sources and seeded mixes: what the load asks the model (see prompts/README in the docs)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Conversation:
    """What a multi-turn session sends after its first turn (loadgen/prompts/conversation.py draws it): the user's
    later messages, and the think time before each (seconds after the previous answer ended)."""

    follow_ups: tuple[str, ...]
    think_s: tuple[float, ...]

    @property
    def turns(self) -> int:
        return 1 + len(self.follow_ups)


@dataclass(frozen=True, slots=True)
class Agent:
    """What an agent session offers and sends back (loadgen/prompts/agent.py): its tools (OpenAI `tools` entries),
    each tool result's length in characters, and the most tool results one session sends."""

    tools: tuple[dict, ...]
    result_chars: int
    max_calls: int


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
    conversation: Conversation | None = None   # set: the first turn of a session (its later turns are built from
    #                                            the server's own answers while it runs)
    shared_prefix: str | None = None   # the shared context it starts with ("<source>#<k>"): requests.shared_prefix
    session_id: str | None = None      # a conversation's turn as sent, or the session a trace row names
    turn: int | None = None            # a conversation's turn: requests.turn (a trace row has none: its prompt
    #                                    shares no prefix, so it keeps opting out of prefix reuse)
    agent: Agent | None = None         # an agent session's turn: the tools go with it (chat: OpenAI `tools`)

    @property
    def reuses_prefix(self) -> bool:
        """Meant to hit the server's prefix cache (a conversation's history, a shared context): the request must
        not opt out of prefix reuse (llama.cpp cache_prompt, vLLM cache_salt)."""
        return (self.conversation is not None or self.turn is not None or self.shared_prefix is not None
                or self.agent is not None)
