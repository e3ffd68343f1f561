"""Retrieval-augmented generation (Spec-Bench's RAG task: Natural Questions with retrieved passages): a question
about one standard-library function, answered from five retrieved documents (docstrings) of which one is the
function's own and four are other functions' (chosen stably), in a stable shuffled order."""

from __future__ import annotations

import random

from loadgen.prompts.families.material import documented_functions
from loadgen.prompts.prose_tasks import context
from loadgen.prompts.stdlib_code import StdlibFunction
from loadgen.prompts.task import Pool, Task, stable_hash, user_task

DOCUMENTS = 5


def _document(k: int, fn: StdlibFunction, text: str) -> str:
    return f"[Document {k}] {fn.module}.{fn.qualname}: {text}"   # one line: the docstring starts no line


def _render(i: int) -> Task:
    functions = documented_functions()
    fn, summary = functions[i]
    rng = random.Random(f"rag/{fn.ref}")
    others = rng.sample([j for j in range(len(functions)) if j != i], DOCUMENTS - 1)
    picked = [i, *others]
    rng.shuffle(picked)
    docs = "\n\n".join(_document(k, *functions[j]) for k, j in enumerate(picked, start=1))
    text = ("Answer the question using only the documents below, and cite the document you used as [Document N]. "
            "If the documents do not answer it, say so.\n\n"
            f"{docs}\n\nQuestion: What does `{fn.qualname.rsplit('.', 1)[-1]}` in `{fn.module}` do?")
    return user_task(f"rag/function/{fn.ref}", "rag", "rag/function", text)


def pools() -> dict[str, Pool]:
    size = len(documented_functions())
    return {"function": Pool("rag/function", size, _render,
                             lambda i, chars: context(stable_hash(f"rag/function/{i}"), chars))}
