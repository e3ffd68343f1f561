"""Question answering (Spec-Bench's Natural Questions task): closed-book questions, no passage given, about the
standard library's public functions and Python's keywords; the answer comes from the model's own knowledge."""

from __future__ import annotations

import keyword

from loadgen.prompts.families.material import documented_functions
from loadgen.prompts.prose_tasks import product_pool
from loadgen.prompts.task import Pool

FUNCTION_QUESTIONS = ("What does `{}` in Python's standard library do, and what does it return?",
                      "When would you use `{}` from Python's standard library, and what is a common mistake with it?",
                      "Which arguments does `{}` in Python's standard library take?")
KEYWORD_QUESTIONS = ("What is the `{}` keyword used for in Python?",
                     "Since which Python version has `{}` been a keyword, and what did it replace, if anything?",
                     "Give a one-line example that uses the Python keyword `{}` and say what it does.")


def _ask(name: str, question: str) -> str:
    return ("Answer the following question in a short paragraph. If you are not sure, say so.\n\n"
            f"Question: {question.format(name)}")


def pools() -> dict[str, Pool]:
    functions = [(fn.ref, f"{fn.module}.{fn.qualname}") for fn, _ in documented_functions()]
    keywords = [(kw, kw) for kw in keyword.kwlist]
    return {
        "function": product_pool("function", functions, FUNCTION_QUESTIONS, _ask, "qa"),
        "keyword": product_pool("keyword", keywords, KEYWORD_QUESTIONS, _ask, "qa"),
    }
