"""Calibration benchmark: emulated MTP and DFlash2 sweeps over HTTP, side by side with the field report.

    python tests/benchmarks/bench_emulator_calibration.py [--time-scale 10] [--measure-s 150] [--what-if]

Each setup runs in its own emulator process (`--time-scale S`: the modelled GB10 runs S times faster, and every
time measured here is multiplied back by S). A small aiohttp client keeps exactly C native /generate streams in
flight (closed loop), warms up, then measures for a window of emulated seconds:
  tok/s   output tokens (completion_tokens deltas) of frames arriving inside the window / window
  accept  sum(completion_tokens) / sum(spec_verify_ct) of requests finished inside the window (final frames)
  TTFT    median, first frame with output - send, requests sent inside the window
  ITL     mean per-token gap (a frame's gap split evenly over its tokens), frames inside the window
--what-if adds DFlash2 with draft budget 6 and 4 (the report's proposed next experiment).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import aiohttp
import orjson

from loadgen.emulator.calibration import SETUPS, load_report
from loadgen.emulator.launch import EmulatorProcess

REPORT = load_report()
T = REPORT.targets


class Cell:
    """Measurements of one closed-loop step (times in real seconds until scaled)."""

    def __init__(self) -> None:
        self.tokens = 0
        self.ttft: list[float] = []
        self.itl_sum = 0.0
        self.itl_n = 0
        self.completion = 0
        self.verify = 0


async def one_request(session: aiohttp.ClientSession, url: str, prompt: str, cell: Cell, window: list[float],
                      ) -> None:
    body = {"text": prompt, "stream": True,
            "sampling_params": {"max_new_tokens": REPORT.max_new_tokens, "ignore_eos": True}}
    t_sent = time.monotonic()
    last_t, last_ct, final = None, 0, None
    buf = b""
    async with session.post(f"{url}/generate", data=orjson.dumps(body)) as resp:
        async for chunk in resp.content.iter_any():
            now = time.monotonic()
            buf += chunk
            *frames, buf = buf.split(b"\n\n")
            for f in frames:
                if f == b"data: [DONE]":
                    continue
                meta = orjson.loads(f[6:])["meta_info"]
                ct = meta["completion_tokens"]
                n = ct - last_ct
                inside = window[0] <= now < window[1]
                if n > 0:
                    if last_t is None:
                        if window[0] <= t_sent < window[1]:
                            cell.ttft.append(now - t_sent)
                    elif inside:
                        cell.itl_sum += now - last_t
                        cell.itl_n += n
                    if inside:
                        cell.tokens += n
                    last_t, last_ct = now, ct
                if meta["finish_reason"] is not None:
                    final = (meta, inside)
    if final and final[1] and final[0].get("spec_verify_ct"):
        cell.completion += final[0]["completion_tokens"]
        cell.verify += final[0]["spec_verify_ct"]


async def closed_loop(url: str, c: int, scale: float, warmup_s: float, measure_s: float, prompts: list[str]) -> dict:
    cell = Cell()
    t0 = time.monotonic()
    window = [t0 + warmup_s / scale, t0 + (warmup_s + measure_s) / scale]
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=None)) as session:
        async def worker(i: int) -> None:
            k = i
            while time.monotonic() < window[1]:
                await one_request(session, url, prompts[k % len(prompts)], cell, window)
                k += 1
        await asyncio.gather(*(worker(i) for i in range(c)))
    return {"tok_s": cell.tokens / measure_s,
            "accept": cell.completion / cell.verify if cell.verify else float("nan"),
            "ttft_ms": 1e3 * scale * statistics.median(cell.ttft) if cell.ttft else float("nan"),
            "itl_ms": 1e3 * scale * cell.itl_sum / cell.itl_n if cell.itl_n else float("nan")}


def run_setup(setup: str, concurrency: list[int], scale: float, warmup_s: float, measure_s: float,
              prompts: list[str]) -> dict[int, dict]:
    out = {}
    # no radix cache: the two calibration prompts stand in for a mix of distinct ones (simulate.closed_loop)
    with EmulatorProcess([*SETUPS[setup], "--time-scale", str(scale), "--seed", "1",
                          "--max-running-requests", "64", "--disable-radix-cache"]) as emu:
        for c in concurrency:
            out[c] = asyncio.run(closed_loop(emu.url, c, scale, warmup_s, measure_s, prompts))
    return out


def err(got: float, want: float) -> str:
    return f"{100 * (got / want - 1):+6.1f}%"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--time-scale", type=float, default=10.0)
    p.add_argument("--warmup-s", type=float, default=40.0, help="emulated seconds")
    p.add_argument("--measure-s", type=float, default=150.0, help="emulated seconds")
    p.add_argument("--what-if", action="store_true", help="also DFlash2 with draft budget 6 and 4")
    a = p.parse_args()
    cs = T["concurrency"]
    t_start = time.monotonic()
    res = {s: run_setup(s, cs, a.time_scale, a.warmup_s, a.measure_s, REPORT.prompts) for s in ("mtp", "dflash2")}
    print(f"EMULATED (gb10 + qwen3.8-27b-nvfp4 profiles, time-scale {a.time_scale:g}, window {a.measure_s:g} s, "
          f"{REPORT.max_new_tokens} output tokens, code/prose mix) vs the field report\n")
    print(f"{'C':>3} | {'MTP emu':>8} {'report':>7} {'err':>7} | {'DFl2 emu':>8} {'report':>7} {'err':>7} | "
          f"{'chg emu':>7} {'chg rep':>7} | {'acc MTP':>13} {'err':>7} | {'acc DFl2':>13} {'err':>7}")
    for i, c in enumerate(cs):
        m, d = res["mtp"][c], res["dflash2"][c]
        rm, rd = T["mtp_tok_s"][i], T["dflash2_tok_s"][i]
        line = (f"{c:>3} | {m['tok_s']:8.1f} {rm:7.1f} {err(m['tok_s'], rm)} | {d['tok_s']:8.1f} {rd:7.1f} "
                f"{err(d['tok_s'], rd)} | {err(d['tok_s'], m['tok_s'])} {err(rd, rm)} | ")
        if i < len(T["mtp_accept"]):
            am, ad = T["mtp_accept"][i], T["dflash2_accept"][i]
            line += (f"{m['accept']:5.2f} vs {am:5.2f} {err(m['accept'], am)} | "
                     f"{d['accept']:5.2f} vs {ad:5.2f} {err(d['accept'], ad)}")
        else:
            line += f"{m['accept']:5.2f} (n/a)         | {d['accept']:5.2f} (n/a)"
        print(line)
    print("\nDFlash2 latency     emulated   report    err")
    for c in (8, 16):
        d = res["dflash2"][c]
        print(f"  C={c:<2} TTFT ms   {d['ttft_ms']:8.0f} {T['dflash2_ttft_ms'][str(c)]:8.0f} "
              f"{err(d['ttft_ms'], T['dflash2_ttft_ms'][str(c)])}")
        print(f"  C={c:<2} ITL ms    {d['itl_ms']:8.1f} {T['dflash2_itl_ms'][str(c)]:8.1f} "
              f"{err(d['itl_ms'], T['dflash2_itl_ms'][str(c)])}")
    print("\nEAGLE single stream tok/s   budget 4 (report)   budget 8 (report)")
    for kind, prompt in (("code", REPORT.code_prompt), ("prose", REPORT.prose_prompt)):
        rates = {b: run_setup(f"eagle-b{b}", [1], a.time_scale, a.warmup_s, a.measure_s, [prompt])[1]["tok_s"]
                 for b in (4, 8)}
        want = T[f"eagle_{kind}_tok_s"]
        print(f"  {kind:<6} {rates[4]:8.2f} ({want['4']:5.2f}) {err(rates[4], want['4'])}   "
              f"{rates[8]:8.2f} ({want['8']:5.2f}) {err(rates[8], want['8'])}   b8 slower: {rates[8] < rates[4]}")
    if a.what_if:
        print("\nWHAT-IF DFlash2 draft budget (aggregate tok/s; MTP for reference)")
        wi = {s: run_setup(s, cs, a.time_scale, a.warmup_s, a.measure_s, REPORT.prompts)
              for s in ("dflash2-b6", "dflash2-b4")}
        for c in cs:
            print(f"  C={c:<2} MTP {res['mtp'][c]['tok_s']:7.1f}  b8 {res['dflash2'][c]['tok_s']:7.1f}  "
                  f"b6 {wi['dflash2-b6'][c]['tok_s']:7.1f}  b4 {wi['dflash2-b4'][c]['tok_s']:7.1f}")
    print(f"\nwall time {time.monotonic() - t_start:.0f} s; all numbers above are EMULATED")


if __name__ == "__main__":
    main()
