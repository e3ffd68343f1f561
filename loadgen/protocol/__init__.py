"""API flavours: one adapter per wire protocol, chosen by the target's `flavor`."""

from __future__ import annotations

from loadgen.protocol.base import Adapter
from loadgen.protocol.sglang_native import SglangNativeAdapter

ADAPTERS: dict[str, type[Adapter]] = {
    SglangNativeAdapter.flavor: SglangNativeAdapter,
}


def adapter_for(flavor: str) -> Adapter:
    """The adapter of a flavour; config validation has already rejected unknown names."""
    return ADAPTERS[flavor]()
