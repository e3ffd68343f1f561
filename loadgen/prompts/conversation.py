"""Multi-turn conversations (`kind = "conversation"`): a session opens with a task from the built-in sources, then
asks follow-ups about the server's own answers, pausing a think time before each.

Each turn's prompt is the whole history so far, as the server produced it, plus the new user message, so what the
server caches is exactly what it generated (chat routes: the messages with the assistant's answers; text routes: a
`User: ... / Assistant:` transcript that each answer is appended to as it came). The later turns are built while
the session runs (`next_turn`, called by the load worker, which keeps the streamed answer of conversation requests
only); what is drawn in advance is seeded by the opening task's id: the number of turns, the follow-ups and the
think times, so a prompt id always names the same conversation.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace
from typing import Any

from loadgen.errors import ConfigError
from loadgen.keys import Key
from loadgen.prompts import Conversation, Prompt

MAX_TURNS = 100          # a session longer than this is a typo (and a context window past any server's)
MAX_THINK_S = 3600.0
# A conversation source's own keys (kind = "conversation"; an agent's sessions take `tasks` too)
CONVERSATION_KEYS = (
    Key("turns", (int, dict), {"min": 2, "max": 6}, f"conversation: turns a session has, 1 to {MAX_TURNS}: a count, "
        "{ min, max } (uniform) or { mean[, max] } (geometric)"),
    Key("think_time_s", (float, dict), 0.0, f"conversation: a user's pause before each next turn, 0 to "
        f"{MAX_THINK_S:g} s, spread like turns"),
    Key("tasks", list, ["code", "prose"], "conversation, agent: the built-in kinds a session opens with"),
)
_DEFAULT = {k.name: k.default for k in CONVERSATION_KEYS}

# Follow-ups people send after an answer, by the opening task's kind (others: GENERAL). None starts with a family's
# instruction verb, so a session keeps its task family (loadgen/emulator/promptinfo.py) unless the user changes it.
CODE_FOLLOW_UPS = (
    "Now add type hints to your version and explain any that are not obvious.",
    "Write two pytest tests for the case you think is most likely to break.",
    "Can you make it shorter without making it harder to read?",
    "What changes if the input is very large? Adjust the code if it needs to.",
    "Explain the trickiest line of your answer to a junior developer.",
    "Rewrite your answer as one function with a docstring and an example in it.",
)
GENERAL_FOLLOW_UPS = (
    "Make it about half as long, keeping the main point.",
    "Rewrite that for a ten-year-old.",
    "Give it a title and put a one-sentence summary at the top.",
    "Now say the same in a more formal tone.",
    "What is the weakest part of your answer? Improve it.",
    "Add one concrete example from everyday life.",
    "Which part of your answer are you least sure about, and why?",
)
FOLLOW_UPS = {"code": CODE_FOLLOW_UPS}


@dataclass(frozen=True, slots=True)
class Spread:
    """A number drawn per session: `low` when low == high; uniform in [low, high]; with `mean`, geometric (turns,
    at least 1) or exponential (think time) with that mean, capped at `high`."""

    low: float
    high: float
    mean: float | None = None

    def draw(self, rng: random.Random, whole: bool) -> float:
        if self.mean is not None:
            if whole:   # geometric on 1, 2, ...: P(k) = (1 - q)^(k - 1) q with mean 1 / q
                q = 1.0 / self.mean
                value = 1.0 if q >= 1.0 else 1.0 + math.floor(math.log(1.0 - rng.random()) / math.log(1.0 - q))
            else:
                value = rng.expovariate(1.0 / self.mean) if self.mean > 0 else 0.0
            return min(value, self.high)
        if whole:
            return float(rng.randint(int(self.low), int(self.high)))
        return rng.uniform(self.low, self.high)

    def describe(self) -> str:
        if self.mean is not None:
            return f"mean {self.mean:g}"
        return f"{self.low:g}" if self.low == self.high else f"{self.low:g}-{self.high:g}"


@dataclass(frozen=True, slots=True)
class ConversationConfig:
    """A conversation source: how many turns, how long users think, and which built-in kinds open a session."""

    turns: Spread
    think_time_s: Spread
    tasks: tuple[str, ...]


def parse_conversation(entry: dict, key: str, builtin_kinds: tuple[str, ...]) -> ConversationConfig:
    """The conversation keys of a source (`turns`, `think_time_s`, `tasks`); ConfigError naming the key."""
    return ConversationConfig(
        turns=_spread(entry.get("turns", _DEFAULT["turns"]), f"{key}.turns", 1, MAX_TURNS, whole=True),
        think_time_s=_spread(entry.get("think_time_s", _DEFAULT["think_time_s"]), f"{key}.think_time_s", 0.0,
                             MAX_THINK_S, whole=False),
        tasks=parse_tasks(entry, key, builtin_kinds))


def parse_tasks(entry: dict, key: str, builtin_kinds: tuple[str, ...]) -> tuple[str, ...]:
    """A session source's `tasks`: the built-in kinds its sessions open with (code and prose by default)."""
    tasks = entry.get("tasks", _DEFAULT["tasks"])
    if (not isinstance(tasks, list) or not tasks or len(set(tasks)) != len(tasks)
            or any(t not in builtin_kinds for t in tasks)):
        raise ConfigError(f"{key}.tasks", f"must be a non-empty list of distinct built-in kinds, got {tasks!r}",
                          f"choose from {', '.join(builtin_kinds)}")
    return tuple(t for t in builtin_kinds if t in tasks)


def _spread(raw: Any, key: str, lowest: float, highest: float, whole: bool) -> Spread:
    """`4` (fixed), `{ min = 2, max = 6 }` (uniform) or `{ mean = 4 }` / `{ mean = 4, max = 20 }`."""
    unit = "an integer" if whole else "a number"
    example = "turns = 4, { min = 2, max = 6 } or { mean = 4, max = 20 }" if whole else \
        "think_time_s = 5, { min = 2, max = 10 } or { mean = 5 }"
    if isinstance(raw, dict):
        unknown = sorted(set(raw) - {"min", "max", "mean"})
        if unknown or not raw or ("mean" in raw and "min" in raw) or ("mean" not in raw and set(raw) != {"min", "max"}):
            raise ConfigError(key, f"must be {unit}, {{ min, max }} or {{ mean[, max] }}, got {raw!r}",
                              f"e.g. {example}")
        values = {name: _value(v, f"{key}.{name}", lowest, highest, whole) for name, v in raw.items()}
        if "mean" in values:
            return Spread(lowest, values.get("max", highest), values["mean"])
        if values["max"] < values["min"]:
            raise ConfigError(f"{key}.max", f"{values['max']:g} is below min = {values['min']:g}", "make max >= min")
        return Spread(values["min"], values["max"])
    value = _value(raw, key, lowest, highest, whole)
    return Spread(value, value)


def _value(raw: Any, key: str, lowest: float, highest: float, whole: bool) -> float:
    ok = (isinstance(raw, int) if whole else isinstance(raw, (int, float))) and not isinstance(raw, bool)
    if not ok or not math.isfinite(raw) or not lowest <= raw <= highest:
        kind = "an integer" if whole else "a number"
        raise ConfigError(key, f"must be {kind} from {lowest:g} to {highest:g}, got {raw!r}",
                          f"e.g. {key.rsplit('.', 1)[-1]} = {int(lowest) + 3 if whole else 5}")
    return float(raw)


def conversation_for(task_id: str, kind: str, cfg: ConversationConfig, seed: int) -> Conversation:
    """The session that opens with task `task_id`: its later messages and think times, seeded by the task's id (the
    same task always opens the same conversation)."""
    rng = random.Random(f"{seed}/conversation/{task_id}")
    turns = int(cfg.turns.draw(rng, whole=True))
    pool = FOLLOW_UPS.get(kind, GENERAL_FOLLOW_UPS)
    follow_ups = [pool[i % len(pool)] for i in _order(rng, len(pool), turns - 1)]
    return Conversation(tuple(follow_ups), tuple(cfg.think_time_s.draw(rng, whole=False) for _ in follow_ups))


def _order(rng: random.Random, size: int, n: int) -> list[int]:
    """n indices into a list of `size`: a shuffled pass, then another, so a follow-up repeats only after all."""
    out: list[int] = []
    while len(out) < n:
        out += rng.sample(range(size), size)
    return out[:n]


def transcript_turn(message: str) -> str:
    """A user message on a text route: one transcript turn that the answer continues."""
    return f"User: {message}\n\nAssistant:"


def first_turn(prompt: Prompt, session_id: str) -> Prompt:
    """A session's first request: its opening prompt, labelled with the session."""
    return replace(prompt, prompt_id=f"{prompt.prompt_id}@1", conversation=None, session_id=session_id, turn=1)


def next_turn(first: Prompt, answers: list[str], session_id: str) -> Prompt:
    """Turn len(answers) + 1 of a session that opened with `first` (a session's first prompt, still carrying its
    Conversation): the history with the server's own answers, then the next follow-up."""
    conversation, turn = first.conversation, len(answers) + 1
    assert conversation is not None and 2 <= turn <= conversation.turns
    asked = conversation.follow_ups[:turn - 1]
    if first.messages is not None:
        later = tuple(m for answer, question in zip(answers, asked)
                      for m in ({"role": "assistant", "content": answer}, {"role": "user", "content": question}))
        return replace(first, prompt_id=f"{first.prompt_id}@{turn}", messages=first.messages + later,
                       target_tokens=None, conversation=None, session_id=session_id, turn=turn)
    assert first.text is not None
    text = first.text + "".join(f"{answer}\n\n{transcript_turn(question)}" for answer, question in zip(answers, asked))
    return replace(first, prompt_id=f"{first.prompt_id}@{turn}", text=text, target_tokens=None, conversation=None,
                   session_id=session_id, turn=turn)
