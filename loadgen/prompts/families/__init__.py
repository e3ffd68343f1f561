"""Spec-Bench's task families as built-in sources (`kind = "translation"`, ...): prompts built from text that
ships with Python itself (families/material.py), each labelled with its family as its prompt kind, which the
emulator also recognises from the instruction (loadgen/emulator/promptinfo.py)."""

from __future__ import annotations

from collections.abc import Callable

from loadgen.prompts.families import mathword, qa, rag, summarization, translation
from loadgen.prompts.task import Pool

_FAMILIES: dict[str, Callable[[], dict[str, Pool]]] = {
    "translation": translation.pools,
    "summarization": summarization.pools,
    "qa": qa.pools,
    "math": mathword.pools,
    "rag": rag.pools,
}
TEMPLATES: dict[str, tuple[str, ...]] = {
    "translation": ("paragraph", "docstring", "zen"),
    "summarization": ("document", "license"),
    "qa": ("function", "keyword"),
    "math": ("word_problem",),
    "rag": ("function",),
}


def family_pools(family: str, templates: tuple[str, ...]) -> list[Pool]:
    """One pool per requested template of a family (names checked by the config against TEMPLATES)."""
    pools = _FAMILIES[family]()
    return [pools[name] for name in templates]
