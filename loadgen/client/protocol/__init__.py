"""API flavours: one adapter per wire protocol, chosen by the target's `flavor`."""

from __future__ import annotations

from loadgen.client.protocol.base import Adapter
from loadgen.client.protocol.openai import OpenAIChatAdapter, OpenAICompletionsAdapter, OpenAIOptions
from loadgen.client.protocol.sglang_native import SglangNativeAdapter

ADAPTERS: dict[str, type[Adapter]] = {
    SglangNativeAdapter.flavor: SglangNativeAdapter,
    OpenAICompletionsAdapter.flavor: OpenAICompletionsAdapter,
    OpenAIChatAdapter.flavor: OpenAIChatAdapter,
}


def adapter_for(flavor: str, options: OpenAIOptions | None = None) -> Adapter:
    """The adapter of a flavour; config validation has already rejected unknown names. `options` are the
    openai-* flavours' resolved request options (model, usage, spec details)."""
    if flavor == SglangNativeAdapter.flavor:
        return SglangNativeAdapter()
    return ADAPTERS[flavor](options)  # type: ignore[call-arg]
