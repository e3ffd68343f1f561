"""Strict `sampling_params` checking with SGLang 0.5.23's exact error texts (its generated JSON contract:
serde-style "unknown field `x`, expected one of ..." and "invalid type: floating point `128.0`, expected i64")."""

from __future__ import annotations

from typing import Any


class ContractError(ValueError):
    """A body the SGLang contract rejects: HTTP 400 with {"error": str(self)}."""


# Field order matters: SGLang lists the expected fields in this order in its error text.
_FIELDS: dict[str, str] = {
    "max_new_tokens": "int", "stop": "strlist", "stop_token_ids": "intlist", "stop_regex": "strlist",
    "temperature": "float", "top_p": "float", "top_k": "int", "min_p": "float",
    "frequency_penalty": "float", "presence_penalty": "float", "repetition_penalty": "float",
    "min_new_tokens": "int", "n": "int", "json_schema": "str", "regex": "str", "ebnf": "str",
    "structural_tag": "str", "ignore_eos": "bool", "skip_special_tokens": "bool",
    "spaces_between_special_tokens": "bool", "no_stop_trim": "bool", "stream_interval": "int",
    "logit_bias": "floatmap", "sampling_seed": "int", "custom_params": "any", "beam_width": "int",
    "watermark": "map", "choice": "strseq",
}
_EXPECTED = {"int": "i64", "float": "f64", "str": "a string", "bool": "a boolean"}


def unexpected(v: Any) -> str:
    """serde's rendering of an unexpected JSON value."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return f"boolean `{'true' if v else 'false'}`"
    if isinstance(v, int):
        return f"integer `{v}`"
    if isinstance(v, float):
        return f"floating point `{v}`"
    if isinstance(v, str):
        return f'string "{v}"'
    if isinstance(v, list):
        return "sequence"
    if isinstance(v, dict):
        return "map"
    return type(v).__name__


def invalid_type(v: Any, expected: str) -> ContractError:
    return ContractError(f"invalid type: {unexpected(v)}, expected {expected}")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check(kind: str, v: Any) -> None:
    if kind == "any" or v is None:
        return
    if kind == "int" and not _is_int(v):
        raise invalid_type(v, "i64")
    if kind == "float" and not (isinstance(v, (int, float)) and not isinstance(v, bool)):
        raise invalid_type(v, "f64")
    if kind == "str" and not isinstance(v, str):
        raise invalid_type(v, "a string")
    if kind == "bool" and not isinstance(v, bool):
        raise invalid_type(v, "a boolean")
    if kind == "strlist" and not (isinstance(v, str) or (isinstance(v, list) and all(isinstance(e, str) for e in v))):
        raise invalid_type(v, "a string or a list of strings")
    if kind == "intlist" and not (isinstance(v, list) and all(_is_int(e) for e in v)):
        raise invalid_type(v, "a sequence")
    if kind == "strseq" and not (isinstance(v, list) and all(isinstance(e, str) for e in v)):
        raise invalid_type(v, "a sequence")
    if kind in ("map", "floatmap") and not isinstance(v, dict):
        raise invalid_type(v, "a map")


def parse_sampling_params(value: Any) -> dict[str, Any]:
    """Validate a native `sampling_params` object; returns it with SGLang's defaults filled in."""
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise invalid_type(value, "struct SamplingParams")
    for key, v in value.items():
        kind = _FIELDS.get(key)
        if kind is None:
            listed = ", ".join(f"`{f}`" for f in _FIELDS)
            raise ContractError(f"unknown field `{key}`, expected one of {listed}")
        _check(kind, v)
    out: dict[str, Any] = {"max_new_tokens": 128, "min_new_tokens": 0, "ignore_eos": False, "stream_interval": None}
    out.update({k: v for k, v in value.items() if v is not None})
    if out["max_new_tokens"] < 0:
        raise ContractError(f"max_new_tokens must be at least 0, got {out['max_new_tokens']}.")
    if out["min_new_tokens"] < 0 or out["min_new_tokens"] > out["max_new_tokens"]:
        raise ContractError(f"min_new_tokens must be in [0, max_new_tokens({out['max_new_tokens']})], "
                            f"got {out['min_new_tokens']}.")
    if out["stream_interval"] is not None and out["stream_interval"] < 1:
        raise ContractError(f"stream_interval must be at least 1, got {out['stream_interval']}.")
    return out
