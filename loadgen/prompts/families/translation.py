"""Translation (Spec-Bench's WMT14 task): real English text shipped with Python, into one of eight languages.

The standard library ships its text in English only, so the source side is English (documentation paragraphs,
docstrings, The Zen of Python) and the languages vary on the target side; the answer restates the prompt's content
in another language, which is what moves a draft's acceptance (it cannot copy the words).
"""

from __future__ import annotations

from loadgen.prompts.families.material import documented_functions, zen
from loadgen.prompts.prose_tasks import product_pool, prose_paragraphs
from loadgen.prompts.task import Pool

LANGUAGES = ("German", "French", "Spanish", "Italian", "Portuguese", "Dutch", "Japanese", "Chinese")
PARAGRAPH_MIN, PARAGRAPH_MAX = 200, 1500


def _paragraph(text: str, language: str) -> str:
    return (f"Translate the following paragraph from the Python documentation into {language}. Keep names of "
            f"functions, modules and keywords as they are. Reply with the translation only.\n\n{text}")


def _docstring(text: str, language: str) -> str:
    return (f"Translate this docstring of a Python function into {language}, so that it can go into a localized "
            f"reference manual. Keep code names unchanged.\n\n\"\"\"{text}\"\"\"")


def _zen(text: str, language: str) -> str:
    return (f"Translate The Zen of Python into {language}, one line for each line below, keeping the order.\n\n"
            f"{text}")


def pools() -> dict[str, Pool]:
    paragraphs = [(str(i), p) for i, p in enumerate(prose_paragraphs()) if PARAGRAPH_MIN <= len(p) <= PARAGRAPH_MAX]
    docstrings = [(fn.ref, summary) for fn, summary in documented_functions()]
    return {
        "paragraph": product_pool("paragraph", paragraphs, LANGUAGES, _paragraph, "translation"),
        "docstring": product_pool("docstring", docstrings, LANGUAGES, _docstring, "translation"),
        "zen": product_pool("zen", [("this", "\n".join(zen()))] if zen() else [], LANGUAGES, _zen, "translation"),
    }
