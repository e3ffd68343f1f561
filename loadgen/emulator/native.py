"""SGLang's native `POST /generate`: body checks, the frame/response shape and meta_info key order of 0.5.23."""

from __future__ import annotations

import time
from typing import Any

import orjson
from aiohttp import web

from loadgen.emulator import streaming
from loadgen.emulator.httputil import json_response
from loadgen.emulator.request import EmuRequest
from loadgen.emulator.sampling import ContractError, invalid_type, parse_sampling_params
from loadgen.emulator.state import EmulatorState, emulator


def parse_generate(body: Any) -> tuple[str | list[int], dict[str, Any], bool, str | None]:
    """(prompt, sampling params, stream, rid) of a /generate body; ContractError with SGLang's text."""
    if not isinstance(body, dict):
        raise invalid_type(body, "struct GenerateRequest")
    text, ids = body.get("text"), body.get("input_ids")
    if text is not None and not isinstance(text, str):
        raise invalid_type(text, "a string")
    if ids is not None and not (isinstance(ids, list) and all(isinstance(i, int) and not isinstance(i, bool)
                                                             for i in ids)):
        raise invalid_type(ids, "a sequence of integers")
    prompt = text if text is not None else ids
    if prompt is None:
        raise ContractError("Either text, input_ids or input_embeds should be provided.")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise invalid_type(stream, "a boolean")
    rid = body.get("rid")
    if rid is not None and not isinstance(rid, str):
        raise invalid_type(rid, "a string")
    return prompt, parse_sampling_params(body.get("sampling_params")), stream, rid


class NativeFormat:
    """Frames of /generate: {"text","output_ids","meta_info"}; cumulative unless incremental."""

    headers_after_first = False

    def __init__(self, emu: EmulatorState) -> None:
        self.emu = emu
        self.incremental = emu.args.incremental_streaming_output

    def meta(self, req: EmuRequest, n: int, final: bool) -> dict[str, Any]:
        emu = self.emu
        m: dict[str, Any] = {"id": req.id, "finish_reason": req.finish_reason if final else None,
                             "prompt_tokens": req.prompt_tokens, "weight_version": "default",
                             "num_retractions": 0}
        if emu.args.enable_metrics:
            m["queue_time"] = max(0.0, (req.t_admitted_ns - req.t_received_ns) / 1e9) if req.t_admitted_ns else 0.0
            m["forward_entry_time"] = req.t_admitted_ns / 1e9 if req.t_admitted_ns else None
        m["reasoning_tokens"] = 0
        m["completion_tokens"] = n
        m["cached_tokens"] = req.cached_tokens
        if final:
            e2e = time.perf_counter() - req.t_received_perf
            m["e2e_latency"] = e2e
            spec = emu.spec
            if spec.enabled and req.spec_verify_ct > 0:
                proposed = req.spec_verify_ct * (spec.verify_tokens - 1)
                if proposed > 0:
                    m["spec_accept_rate"] = req.correct_drafts / proposed
                    m["spec_accept_length"] = n / req.spec_verify_ct
                    m["spec_num_correct_drafts"] = req.correct_drafts
                    m["spec_num_proposed_drafts"] = proposed
                    m["spec_verify_ct"] = req.spec_verify_ct
            if emu.args.enable_metrics:
                first = (req.t_first_ns - req.t_received_ns) / 1e9 if req.t_first_ns else None
                m["request_received_ts"] = req.t_received_ns / 1e9
                m["first_token_latency"] = first
                dec = e2e - (first or 0.0)
                m["decode_throughput"] = (n - 1) / dec if n > 1 and dec > 0 else 0.0
        return m

    def body(self, req: EmuRequest, start: int, end: int, final: bool) -> dict[str, Any]:
        if req.finish_reason and req.finish_reason["type"] == "abort" and final:
            return self.abort_body(req)
        if self.incremental:
            text, ids = req.text_between(start, end), req.output_ids[start:end]
        else:
            text, ids = req.text_upto(end), req.output_ids[:end]
        return {"text": text, "output_ids": ids, "meta_info": self.meta(req, end, final)}

    def abort_body(self, req: EmuRequest) -> dict[str, Any]:
        """SGLang's abort output (_handle_abort_req): a short meta_info with the abort reason."""
        n = len(req.output_ids)
        ids = req.output_ids[-1:] if self.incremental else list(req.output_ids)
        return {"text": req.text, "output_ids": ids,
                "meta_info": {"id": req.id, "finish_reason": req.finish_reason, "weight_version": "default",
                              "e2e_latency": time.perf_counter() - req.t_received_perf, "completion_tokens": n}}

    def frames(self, req: EmuRequest, start: int, end: int, final: bool) -> bytes:
        return b"data: " + orjson.dumps(self.body(req, start, end, final)) + b"\n\n"

    def abort_frames(self, req: EmuRequest) -> bytes:
        return b"data: " + orjson.dumps(self.abort_body(req)) + b"\n\n"


async def generate(request: web.Request) -> web.StreamResponse:
    emu = emulator(request)
    try:
        body = orjson.loads(await request.read())
    except orjson.JSONDecodeError as exc:
        return json_response({"error": f"Invalid JSON body: {exc}"}, 400)
    try:
        prompt, sp, stream, rid = parse_generate(body)
    except ContractError as exc:
        return json_response({"error": str(exc)}, 400)
    req = emu.new_request(prompt, "generate", rid=rid, max_new_tokens=sp["max_new_tokens"],
                          min_new_tokens=sp["min_new_tokens"], ignore_eos=sp["ignore_eos"],
                          stream_interval=sp["stream_interval"], stream=stream)
    if req.fault is not None and req.fault.type == "http":
        return emu.http_fault(req)
    await emu.ready()
    emu.submit(req)
    fmt = NativeFormat(emu)
    if stream:
        return await streaming.stream(request, req, emu.engine, fmt)
    return await emu.wait_whole(req, lambda: _whole(emu, req, fmt))


def _whole(emu: EmulatorState, req: EmuRequest, fmt: NativeFormat) -> web.Response:
    """A non-streaming /generate answer: the whole text and meta_info, or the abort's HTTP error."""
    err = emu.abort_error(req)
    if err is not None:
        return err
    n = len(req.output_ids)
    return json_response({"text": req.text, "output_ids": list(req.output_ids), "meta_info": fmt.meta(req, n, True)})
