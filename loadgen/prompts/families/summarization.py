"""Summarization (Spec-Bench's CNN/DailyMail task): documents of 1,800-6,000 characters that ship with Python
(documentation sections, the licence texts), summarized in one of three forms. Longer than `prose/summarise`'s
passages: a summary of a document, not of a paragraph."""

from __future__ import annotations

from loadgen.prompts.families.material import documents, license_sections
from loadgen.prompts.prose_tasks import product_pool
from loadgen.prompts.task import Pool

STYLES = ("in three bullet points", "in one paragraph for a busy manager", "in a single sentence")


def _document(text: str, style: str) -> str:
    return f"Summarize the following document {style}.\n\n---\n{text}\n---"


def _license(text: str, style: str) -> str:
    return (f"Summarize the following licence text {style}, saying what it allows and what it asks of "
            f"whoever redistributes the software.\n\n---\n{text}\n---")


def pools() -> dict[str, Pool]:
    licences = [(str(i), text) for i, text in enumerate(license_sections())]
    return {
        "document": product_pool("document", documents(), STYLES, _document, "summarization"),
        "license": product_pool("license", licences, STYLES, _license, "summarization"),
    }
