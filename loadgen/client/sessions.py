"""Conversation sessions on a load worker: the turns of one session, each sent when the previous answer has ended
and the user's think time has passed, each prompt the history with the server's own answers
(loadgen/prompts/conversation.py builds it; protocol/answer.py keeps the answer's text, for these requests only).

A closed-loop slot is one user: it runs sessions back to back, so a level of C holds C sessions in flight, with
fewer requests in flight while users think. An open-loop arrival starts a session. Each turn is one request with its
own row (session_id, turn) and phase by its own send time; a turn that does not end `ok` ends its session (the
history would lack its answer).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from loadgen.client.protocol.answer import AnswerText
from loadgen.client.protocol.base import Adapter
from loadgen.clock import now_ns
from loadgen.prompts import Prompt
from loadgen.prompts.agent import agent_turn, tool_result
from loadgen.prompts.conversation import first_turn, next_turn

THINK_POLL_S = 0.1   # a thinking user notices the step's end this soon

Send = Callable[[Prompt, Adapter, int, str], Awaitable[str]]   # (prompt, adapter, t_scheduled_ns, id suffix) -> status


async def run_session(opening: Prompt, session_id: str, t_first_ns: int, adapter: Adapter, send: Send,
                      going: Callable[[], bool]) -> str:
    """Every turn of the session `opening` starts, while `going()` holds; the status of the last turn sent."""
    conversation = opening.conversation
    assert conversation is not None
    answers: list[str] = []
    status, t_scheduled = "ok", t_first_ns
    for turn in range(1, conversation.turns + 1):
        if turn > 1:
            if not await _think(conversation.think_s[turn - 2], going):
                break
            t_scheduled = now_ns()
        if not going():
            break
        prompt = first_turn(opening, session_id) if turn == 1 else next_turn(opening, answers, session_id)
        answer = AnswerText(adapter)
        status = await send(prompt, answer, t_scheduled, f".{turn}")
        if status != "ok":
            break
        answers.append(answer.text)
    return status


async def run_agent_session(opening: Prompt, session_id: str, t_first_ns: int, adapter: Adapter, send: Send,
                            going: Callable[[], bool]) -> str:
    """An agent session (loadgen/prompts/agent.py): each turn the server calls a tool, the seeded result goes back
    with the next turn, until it answers in prose, max_calls results were sent, a turn fails or the step ends; the
    status of the last turn sent."""
    agent = opening.agent
    assert agent is not None
    exchanges: list[tuple[dict, dict]] = []
    status, t_scheduled, prompt = "ok", t_first_ns, first_turn(opening, session_id)
    while going():
        answer = AnswerText(adapter, agent=True)
        status = await send(prompt, answer, t_scheduled, f".{len(exchanges) + 1}")
        if status != "ok" or not answer.called or len(exchanges) == agent.max_calls:
            break
        exchanges.append(answer.exchange(tool_result(session_id, len(exchanges) + 1, agent.result_chars)))
        prompt, t_scheduled = agent_turn(opening, exchanges, session_id), now_ns()
    return status


async def _think(seconds: float, going: Callable[[], bool]) -> bool:
    """Wait `seconds`, or less when the step ends meanwhile; whether to go on."""
    end = now_ns() + int(seconds * 1e9)
    while going() and (left := (end - now_ns()) / 1e9) > 0:
        await asyncio.sleep(min(left, THINK_POLL_S))
    return going()


def users_think(prompts: Sequence[Prompt]) -> bool:
    """Whether some session pauses between turns: then a closed-loop level counts users, not requests in flight."""
    return any(p.conversation is not None and any(t > 0 for t in p.conversation.think_s) for p in prompts)
