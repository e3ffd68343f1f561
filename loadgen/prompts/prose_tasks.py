"""The built-in `prose` source: templates over loadgen's topic lists and over documentation passages
that ship with Python itself (`pydoc_data.topics`, module docstrings).

Free writing (essay, story, email, explain) gives a draft model little to copy; summarise and answer
put a passage in the prompt that the reply reuses: the two ends of prose acceptance.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence

from loadgen.prompts import prose_topics as words
from loadgen.prompts.sizing import MIN_CONTEXT, fill
from loadgen.prompts.stdlib_code import stdlib_module_docs
from loadgen.prompts.task import Pool, Task, stable_hash, user_task

PASSAGE_MIN, PASSAGE_MAX = 600, 2500   # characters: long enough to summarise, short enough to read


def _essay(topic: str, angle: str) -> str:
    return (f"Write an essay of about 500 words on {topic}, {angle}. Use plain language, give each "
            "paragraph one idea, and end with a short conclusion that does not just repeat the introduction.")


def _story(topic: str, narrator: str) -> str:
    return (f"Write a short story of about 400 words built around {topic}, told from the point of view "
            f"of {narrator}. Give the main character a clear wish, an obstacle, and a small change by "
            "the end. Keep the dialogue natural.")


def _email(situation: str, recipient: str) -> str:
    return (f"Write an email to {recipient}, {situation}. Keep it under 200 words, with a subject line, "
            "a friendly but professional tone, and one clear request or next step at the end. Do not use "
            "placeholder names in square brackets.")


def _explain(topic: str, audience: str) -> str:
    return (f"Explain {topic} to {audience}. Start with the core idea in one sentence, then build up the "
            "details step by step, using one everyday comparison. Finish with a question the reader "
            "could explore next.")


def _summarise(passage: str, style: str) -> str:
    return f"Summarise the following passage from the Python documentation {style}.\n\n---\n{passage}\n---"


def _answer(passage: str, question: str) -> str:
    return ("Read the passage below from the Python documentation and answer the question. Base the "
            "answer on the passage, and say so when the passage does not cover something.\n\n"
            f"Question: {question}\n\n---\n{passage}\n---")


@functools.cache
def passages() -> tuple[tuple[str, str], ...]:
    """(passage id, text): the pydoc topics then the module docstrings, cut at paragraph breaks."""
    from pydoc_data.topics import topics  # stdlib; imported here so importing loadgen stays cheap

    sources = [(f"pydoc:{name}", topics[name]) for name in sorted(topics)]
    sources += [(f"doc:{module}", doc) for module, doc in stdlib_module_docs()]
    out: list[tuple[str, str]] = []
    for source_id, text in sources:
        out.extend((f"{source_id}#{i}", chunk) for i, chunk in enumerate(_chunks(text)))
    return tuple(out)


def _chunks(text: str) -> list[str]:
    """Consecutive prose paragraphs joined up to PASSAGE_MAX; indented paragraphs (code examples,
    grammar rules) are left out so a `prose` prompt reads as prose; pieces shorter than PASSAGE_MIN
    are dropped."""
    chunks: list[str] = []
    current = ""
    for paragraph in (p.strip("\n") for p in text.split("\n\n")):
        if not paragraph.strip() or paragraph[0].isspace():
            continue
        if current and len(current) + 2 + len(paragraph) > PASSAGE_MAX:
            chunks.append(current)
            current = ""
        current = f"{current}\n\n{paragraph}" if current else paragraph
    chunks.append(current)
    return [c for c in chunks if PASSAGE_MIN <= len(c) <= PASSAGE_MAX]


def product_pool(name: str, first: Sequence[tuple[str, str]], second: Sequence[str],
                 build: Callable[[str, str], str], kind: str = "prose") -> Pool:
    """Every (first, second) pair, first-major, as tasks of `kind` (template `<kind>/<name>`). `first` holds
    (id, value) so ids stay readable. Sized prompts get documentation paragraphs in front (`context`)."""
    def render(i: int) -> Task:
        (first_id, value), j = first[i // len(second)], i % len(second)
        return user_task(f"{kind}/{name}/{first_id}/{j}", kind, f"{kind}/{name}", build(value, second[j]))

    return Pool(f"{kind}/{name}", len(first) * len(second), render,
                lambda i, chars: context(stable_hash(f"{kind}/{name}/{i}"), chars))


def context(start: int, chars: int) -> str:
    """Consecutive prose paragraphs of the documentation from a stable place (`start`, wrapping), as background
    reading."""
    head, tail = "Background reading from the Python documentation:\n\n", "\n\n"
    room = chars - len(head) - len(tail)
    texts = prose_paragraphs()
    if room < MIN_CONTEXT:
        return ""
    body = fill((texts[(start + k) % len(texts)] for k in range(len(texts))), room, " \n")
    return f"{head}{body}{tail}" if body else ""


_NOT_PROSE = re.compile(r"[|=+*~^-]{3}|\|")   # table borders, rules and underlines of headings


@functools.cache
def prose_paragraphs() -> tuple[str, ...]:
    """The passages' paragraphs that read as prose: no tables or heading rules, not a list of bare names (most
    lines without a space), mostly letters, six words or more. Context made of them reads as text, and its
    tokens per character vary as little as prose does."""
    def prose(paragraph: str) -> bool:
        lines = paragraph.splitlines()
        letters = sum(c.isalpha() or c.isspace() for c in paragraph)
        return (not _NOT_PROSE.search(paragraph) and 2 * sum(" " not in ln.strip() for ln in lines) <= len(lines)
                and letters >= 0.8 * len(paragraph) and len(paragraph.split()) >= 6)

    return tuple(p for _, text in passages() for p in text.split("\n\n") if prose(p))


def _numbered(values: Sequence[str]) -> list[tuple[str, str]]:
    return [(str(i), v) for i, v in enumerate(values)]


_POOLS: dict[str, Callable[[], Pool]] = {
    "essay": lambda: product_pool("essay", _numbered(words.TOPICS), words.ESSAY_ANGLES, _essay),
    "story": lambda: product_pool("story", _numbered(words.TOPICS), words.STORY_NARRATORS, _story),
    "email": lambda: product_pool("email", _numbered(words.EMAIL_SITUATIONS), words.EMAIL_RECIPIENTS, _email),
    "explain": lambda: product_pool("explain", _numbered(words.TOPICS), words.AUDIENCES, _explain),
    "summarise": lambda: product_pool("summarise", passages(), words.SUMMARY_STYLES, _summarise),
    "answer": lambda: product_pool("answer", passages(), words.PASSAGE_QUESTIONS, _answer),
}
TEMPLATES = tuple(_POOLS)


def prose_pools(templates: tuple[str, ...]) -> list[Pool]:
    """One pool per requested template name (names checked by the config against TEMPLATES)."""
    return [_POOLS[name]() for name in templates]
