"""What the emulated model "feels" from a prompt: its kind and its length in tokens.

The kind comes from the text itself, never from a client label: a real draft accepts more on code because
code is predictable, whatever the client calls it. A prompt whose instruction asks for one of Spec-Bench's task
families (a line that starts "Translate", "Summarize"/"Summarise", "Solve", "Answer ... documents" or "Answer", after
an optional "User:" or "Please") is that family; the last such line wins, so a conversation
keeps its task until a later turn asks for another. Otherwise it is code or prose by its code signals. Token
counts are approximated as ceil(chars / 4) (the usual ~4 characters per BPE token for English and code);
`input_ids` are counted exactly.
"""

from __future__ import annotations

import re

CHARS_PER_TOKEN = 4
_CODE_WORDS = re.compile(
    r"\b(def|return|import|class|function|const|let|var|elif|lambda|public|static|void|struct|fn|impl|"
    r"#include|printf|self|None|null|true|false|async|await)\b|=>|->|::|==|!=|\+=|\bfor\s*\(|\bif\s*\(")
_CODE_TASK = re.compile(
    r"\b(python|javascript|typescript|rust|golang|java|c\+\+|sql|bash|function|method|implement|refactor|"
    r"compile|bug|regex|script|algorithm|module|unit tests?|api|json|csv)\b", re.IGNORECASE)
_CODE_CHARS = set("{}()[];=<>_#*/\\|&")
CODE_THRESHOLD = 0.09
FAMILIES = ("translation", "summarization", "rag", "math", "qa")   # Spec-Bench's task families, as prompt kinds
_FAMILY = re.compile(
    r"^(?:user:\s*)?(?:please\s+)?(?:(?P<translation>translate)\b|(?P<summarization>summari[sz]e|tl;?dr)\b"
    r"|(?P<rag>answer)\b[^\n]*\b(?:documents?|sources|search results)\b|(?P<math>solve)\b"
    r"|(?P<qa>answer)\b)", re.IGNORECASE | re.MULTILINE)


def estimate_tokens(text: str) -> int:
    """Prompt tokens for a text: ceil(len / 4), at least 1."""
    return max(1, -(-len(text) // CHARS_PER_TOKEN))


def code_score(text: str) -> float:
    """Share of code signals: symbol density plus keyword/operator hits and indented lines."""
    if not text:
        return 0.0
    sample = text[-4000:]                       # the task usually sits at the end of a long prompt
    symbols = sum(1 for c in sample if c in _CODE_CHARS) / len(sample)
    words = max(1, len(sample.split()))
    keywords = (len(_CODE_WORDS.findall(sample)) + len(_CODE_TASK.findall(sample))) / words
    lines = sample.splitlines() or [sample]
    indented = sum(1 for ln in lines if ln.startswith(("    ", "\t"))) / len(lines)
    return symbols + keywords + 0.1 * indented


def task_family(text: str) -> str | None:
    """The task family the prompt's last instruction line asks for (one of FAMILIES), or None."""
    family = None
    for match in _FAMILY.finditer(text):
        family = match.lastgroup
    return family


def infer_kind(text: str) -> str:
    """A task family, else 'code' or 'prose', from the text alone."""
    return task_family(text) or ("code" if code_score(text) >= CODE_THRESHOLD else "prose")
