"""Every API flavour end to end on a real local Ray: SGLang native, OpenAI completions and OpenAI chat against
emulators (rows agree with the emulator's ground truth, acceptance by kind from SQL matches the truth per kind),
a minimal OpenAI server without usage or spec fields (NULLs, never invented numbers), API keys that never reach
the results, and open-loop arrivals (planned times recorded, lateness in SQL, the in-flight cap holds)."""

from __future__ import annotations

import asyncio
import itertools
import json
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import orjson
import pytest
from aiohttp import web

from conftest import serve_app
from loadgen.client.arrivals import ArrivalSpec, arrival_times
from loadgen.config import parse_experiment
from loadgen.driver.runner import run_experiment
from loadgen.results import analysis

KEY = "sk-test-4c1d9e0b7a-never-stored"
MTP = ("--model-path", "m", "--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3",
       "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4", "--time-scale", "10")
PROMPTS = {"seed": 7, "max_new_tokens": 24, "ignore_eos": True, "chat": True,
           "sources": [{"kind": "code", "weight": 0.5}, {"kind": "prose", "weight": 0.5}]}


def _truth(url: str, key: str | None = None) -> list[dict]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    with urllib.request.urlopen(urllib.request.Request(f"{url}/emulator/requests", headers=headers)) as resp:
        return json.load(resp)["requests"]


@contextmanager
def plain_openai_server() -> Iterator[tuple[str, dict[str, int]]]:
    """A minimal OpenAI chat server (no usage, no sglext, no /get_server_info, like a bare proxy); yields its
    URL and the number of content frames it sent per response id."""
    sent: dict[str, int] = {}
    ids = itertools.count()

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "plain-model", "object": "model"}]})

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        assert body["model"] == "plain-model" and "rid" not in body and "return_spec_tokens_details" not in body
        number = next(ids)
        rid = f"plain-{number}"
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)

        async def event(delta: dict, finish: str | None = None) -> None:
            chunk = {"id": rid, "object": "chat.completion.chunk", "model": "plain-model",
                     "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
            await resp.write(b"data: " + orjson.dumps(chunk) + b"\n\n")
            await asyncio.sleep(0.002)
        await event({"role": "assistant", "content": ""})
        n = 3 + number % 4
        for i in range(n):
            await event({"content": f"w{i} "})
        await event({}, "length")
        sent[rid] = n
        await resp.write(b"data: [DONE]\n\n")
        return resp

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", chat)
    with serve_app(app) as url:
        yield url, sent


@pytest.fixture(scope="module")
def flavors_run(ray_local, emulator_factory, tmp_path_factory):
    key_file = tmp_path_factory.mktemp("secret") / "key.txt"
    key_file.write_text(KEY + "\n")
    with emulator_factory(*MTP, "--seed", "1") as native, \
         emulator_factory(*MTP, "--seed", "2", "--api-key", KEY) as completions, \
         emulator_factory(*MTP, "--seed", "3") as chat, \
         plain_openai_server() as (plain, plain_sent):
        exp = parse_experiment({
            "run": {"name": "flavors"},
            # 12 measured requests per target: both prompt kinds are then all but certain to be among them
            "load": {"concurrency": [4], "warmup_s": 0.3, "measure_s": 2.5, "drain_timeout_s": 20.0,
                     "workers_per_target": 2, "min_measured_requests": 12, "max_measure_s": 30.0},
            "prompts": PROMPTS,
            "targets": [{"name": "native", "url": native},
                        {"name": "completions", "url": completions, "flavor": "openai-completions",
                         "api_key_file": str(key_file)},
                        {"name": "chat", "url": chat, "flavor": "openai-chat", "model": "m"},
                        {"name": "plain", "url": plain, "flavor": "openai-chat", "continuous_usage": False}],
        }, Path("."))
        results = tmp_path_factory.mktemp("results")
        outcome = run_experiment(exp, str(results), log=lambda *a: None)
        truth = {"native": _truth(native), "completions": _truth(completions, KEY), "chat": _truth(chat)}
        yield outcome, truth, dict(plain_sent)


def _rows(outcome, sql: str) -> list[dict]:
    con = analysis.open_results(outcome.results_dir, [outcome.run_id])
    cur = con.execute(sql)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r)) for r in cur.fetchall()]


def test_run_completes_with_every_flavor(flavors_run):
    outcome, _, _ = flavors_run
    assert outcome.status == "complete", outcome.reason
    steps = {r["target"]: r for r in _rows(outcome, "SELECT * FROM steps")}
    assert {t: (s["flavor"], s["algorithm"], s["draft_tokens"]) for t, s in steps.items()} == {
        "native": ("sglang", "NEXTN", 4), "completions": ("openai-completions", "NEXTN", 4),
        "chat": ("openai-chat", "NEXTN", 4), "plain": ("openai-chat", "UNKNOWN", None)}


@pytest.mark.parametrize("target", ["native", "completions", "chat"])
def test_requests_and_frames_agree_with_ground_truth(flavors_run, target):
    outcome, truth, _ = flavors_run
    seen = {t["id"]: t for t in truth[target]}
    rows = _rows(outcome, f"""
        SELECT r.*, (SELECT sum(tokens) FROM frames f WHERE f.run_id = r.run_id AND f.request_id = r.request_id)
                    AS frame_tokens,
               (SELECT count(*) FILTER (tokens IS NULL) FROM frames f
                WHERE f.run_id = r.run_id AND f.request_id = r.request_id) AS unknown_frames
        FROM requests r WHERE target = '{target}' AND status = 'ok'""")
    assert len(rows) >= 10
    for r in rows:
        t = seen[r["server_request_id"]]
        assert t["rid"] == r["request_id"]            # SGLang got our id as rid on every route
        assert t["route"] == {"native": "generate", "completions": "completions", "chat": "chat"}[target]
        assert (r["completion_tokens"], r["prompt_tokens"], r["spec_verify_ct"]) == (
            t["completion_tokens"], t["prompt_tokens"], t["spec_verify_ct"]), r["request_id"]
        assert r["frame_tokens"] == r["completion_tokens"] and r["unknown_frames"] == 0
        assert r["t_sent_ns"] <= r["t_first_token_ns"] <= r["t_last_token_ns"] <= r["t_done_ns"]
    assert {r["request_id"] for r in _rows(outcome, f"SELECT request_id FROM requests WHERE target = '{target}'")} \
        >= {t["rid"] for t in truth[target]}        # every request the server saw has its row


def test_server_without_usage_gives_nulls_not_numbers(flavors_run):
    outcome, _, sent = flavors_run
    rows = _rows(outcome, """
        SELECT r.server_request_id, r.completion_tokens, r.prompt_tokens, r.spec_verify_ct, r.num_frames,
               count(f.seq) AS frames, count(f.tokens) AS known
        FROM requests r LEFT JOIN frames f USING (run_id, request_id)
        WHERE r.target = 'plain' AND r.status = 'ok' GROUP BY ALL""")
    assert len(rows) >= 10
    for r in rows:
        assert (r["completion_tokens"], r["prompt_tokens"], r["spec_verify_ct"], r["known"]) == (None, None, None, 0)
        assert r["frames"] == r["num_frames"] == sent[r["server_request_id"]]   # a row per content frame
    step = _rows(outcome, "SELECT * FROM step_acceptance WHERE target = 'plain' AND prompt_kind = '(all)'")[0]
    assert step["accept_len"] is None and step["tokens_per_frame"] is None


def test_acceptance_by_kind_matches_truth_per_kind(flavors_run):
    outcome, truth, _ = flavors_run
    con = analysis.open_results(outcome.results_dir, [outcome.run_id])
    table = analysis.run_query(con, "acceptance_by_kind").to_pylist()
    ours = {(r[0], r[1]): r[2] for r in con.execute(
        "SELECT target, server_request_id, prompt_kind FROM requests WHERE phase = 'measure' AND status = 'ok'"
    ).fetchall()}
    checked = 0
    for row in table:
        if row["target"] not in truth:
            continue
        seen = [t for t in truth[row["target"]] if (row["target"], t["id"]) in ours
                and row["prompt_kind"] in ("(all)", ours[(row["target"], t["id"])])]
        assert seen, row
        expected = sum(t["completion_tokens"] for t in seen) / sum(t["spec_verify_ct"] for t in seen)
        assert row["accept_len"] == pytest.approx(expected, abs=5e-4 + 1e-9), row  # see test_end_to_end
        checked += 1
    kinds = {(r["target"], r["prompt_kind"]) for r in table}
    assert {(t, k) for t in truth for k in ("code", "prose", "(all)")} <= kinds and checked == 9


def test_api_key_never_reaches_results(flavors_run):
    outcome, _, _ = flavors_run
    found = [p for p in Path(outcome.results_dir).rglob("*") if p.is_file() and KEY.encode() in p.read_bytes()]
    assert found == []
    config = _rows(outcome, "SELECT config FROM runs")[0]["config"]
    assert KEY not in config and "key.txt" in config   # the file's name is recorded, never its content


def test_a_missing_key_file_is_an_error_before_any_load(ray_local, emulator_factory, tmp_path):
    from loadgen.errors import LoadgenError
    with emulator_factory(*MTP, "--api-key", KEY) as url:
        exp = parse_experiment({"load": {"concurrency": [1], "requests": 1}, "prompts": PROMPTS,
                                "targets": [{"name": "t", "url": url, "flavor": "openai-chat",
                                             "api_key_file": str(tmp_path / "absent.txt")}]}, Path("."))
        with pytest.raises(LoadgenError, match="api_key_file .*absent.txt"):
            run_experiment(exp, str(tmp_path / "results"), log=lambda *a: None)
        assert _truth(url, KEY) == []


# Open loop: a rate sweep against one emulator at real (modelled) speed, with a small in-flight cap that the
# higher rate overruns, so lateness must show.
RATES = [4.0, 24.0]
WARMUP_S, MEASURE_S, CAP = 0.5, 1.5, 4


@pytest.fixture(scope="module")
def open_run(ray_local, emulator_factory, tmp_path_factory):
    with emulator_factory(*MTP[:-2]) as url:
        exp = parse_experiment({
            "run": {"name": "open"},
            "load": {"mode": "open", "rates": RATES, "arrival": "poisson", "seed": 4, "max_in_flight": CAP,
                     "warmup_s": WARMUP_S, "measure_s": MEASURE_S, "drain_timeout_s": 60.0, "workers_per_target": 2},
            "prompts": dict(PROMPTS, max_new_tokens=16),
            "targets": [{"name": "chat", "url": url, "flavor": "openai-chat"}],
        }, Path("."))
        outcome = run_experiment(exp, str(tmp_path_factory.mktemp("results")), log=lambda *a: None)
        yield outcome, _truth(url)


def test_open_loop_sends_the_planned_schedule(open_run):
    outcome, truth = open_run
    assert outcome.status == "complete", outcome.reason
    steps = _rows(outcome, "SELECT * FROM steps ORDER BY step_id")
    assert [(s["mode"], s["rate"], s["concurrency"]) for s in steps] == [("open", r, None) for r in RATES]
    for s in steps:
        planned = [t for _, t in itertools.takewhile(lambda a: a[1] < WARMUP_S + MEASURE_S,
                                                      arrival_times(ArrivalSpec("poisson", s["rate"], 1.0, 4)))]
        rows = _rows(outcome, f"SELECT * FROM requests WHERE step_id = {s['step_id']} AND phase != 'drain' "
                              "ORDER BY t_scheduled_ns")
        offsets = [(r["t_scheduled_ns"] - s["t_start_ns"]) / 1e9 for r in rows]
        assert offsets == pytest.approx(planned, abs=1e-8)          # every planned arrival has its row
        measured = [r for r in rows if r["phase"] == "measure"]
        assert len(measured) == sum(WARMUP_S <= t for t in planned)
        assert all(r["status"] == "ok" and r["t_sent_ns"] >= r["t_scheduled_ns"] for r in measured)
    seen = {t["rid"] for t in truth}
    assert {r["request_id"] for r in _rows(outcome, "SELECT request_id FROM requests WHERE status = 'ok'")} <= seen


def test_lateness_in_sql_and_the_cap_holds(open_run):
    outcome, _ = open_run
    con = analysis.open_results(outcome.results_dir, [outcome.run_id])
    late = {r["rate"]: r for r in analysis.run_query(con, "arrival_lateness").to_pylist()}
    assert set(late) == set(RATES)
    low, high = late[RATES[0]], late[RATES[1]]
    assert high["measured"] == _rows(outcome, "SELECT count(*) AS n FROM requests WHERE phase = 'measure' "
                                              "AND step_id = 1")[0]["n"]
    assert 0 <= high["lateness_p50_ms"] <= high["lateness_p99_ms"] <= high["lateness_max_ms"]
    # 24/s against a server that finishes ~10/s within a cap of 4: most sends wait for a slot
    assert high["share_late_1ms"] > 0.5 and high["lateness_max_ms"] > 200
    assert low["lateness_p50_ms"] < high["lateness_p50_ms"]
    in_flight = _rows(outcome, "SELECT max(in_flight) AS m, count(target_in_flight) AS n FROM client_samples")[0]
    assert in_flight["m"] <= CAP // 2 and in_flight["n"] == 0      # per worker share; no closed-loop target
