"""One server to drive: a running server's URL, or an emulator loadgen launches, with its API flavour."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlsplit

from loadgen.config.cost import Prices, read_prices
from loadgen.config.tables import check_name
from loadgen.errors import ConfigError
from loadgen.keys import REQUIRED, Bounds, Choice, Key, Keys, StrictTable
from loadgen.servers.secrets import flag_ref, is_secret_name

EMULATOR_ALGORITHMS = ("NONE", "EAGLE", "EAGLE3", "NEXTN", "DFLASH")

# The API flavours (one adapter each: loadgen.client.protocol.ADAPTERS, whose keys are these)
FLAVORS = ("openai-chat", "openai-completions", "sglang")


@dataclass(frozen=True)
class TwinRef:
    """[targets.twin]: a twin file (`loadgen twin fit`) the target is, run in virtual time (docs/twin.md), and
    what a what-if changes in it; None keeps the twin's own."""

    profile: str                     # the twin file, resolved against the experiment's folder
    draft_tokens: int | None = None  # another draft budget (tokens verified per step)
    max_running_requests: int | None = None
    kv_pool_tokens: int | None = None
    algorithm_from: str | None = None   # another twin's algorithm (its draft and acceptance) on this one's hardware

    def what_if(self) -> str:
        """The changes in words (steps.server_info, the answer), empty when there are none."""
        parts = [f"{k} = {v}" for k, v in (("draft_tokens", self.draft_tokens),
                                             ("max_running_requests", self.max_running_requests),
                                             ("kv_pool_tokens", self.kv_pool_tokens),
                                             ("algorithm_from", self.algorithm_from)) if v is not None]
        return ", ".join(parts)


TWIN = Keys("targets.twin", "A twin file (`loadgen twin fit`) run in virtual time instead of a server "
            "(docs/twin.md), and what a what-if changes in it; `twin = \"file.toml\"` is the file alone.", (
    Key("profile", str, REQUIRED, "the twin file, relative to the experiment file"),
    Key("draft_tokens", int, None, "another draft budget (tokens verified per step)", Bounds(1),
        shown="the twin's"),
    Key("max_running_requests", int, None, "another batch limit", Bounds(1), shown="the twin's"),
    Key("kv_pool_tokens", int, None, "another KV cache size, tokens", Bounds(1), shown="the twin's"),
    Key("algorithm_from", str, None, "another twin file whose algorithm (draft and acceptance) runs on this one's "
        "hardware", shown="the twin's"),
))


def parse_twin_ref(raw: Any, key: str, base_dir: Path) -> TwinRef:
    """A [targets.twin] table (or a search_twin entry): the file exists and every override is a positive count."""
    if isinstance(raw, str):
        raw = {"profile": raw}
    t = StrictTable(raw, key, TWIN)
    profile = (base_dir / t.read("profile")).resolve()
    if not profile.is_file():
        raise ConfigError(f"{key}.profile", f"twin file not found: {profile}",
                          "write one with `loadgen twin fit --results R --run ID -o FILE`")
    counts = {name: t.read(name) for name in ("draft_tokens", "max_running_requests", "kv_pool_tokens")}
    other = t.read("algorithm_from")
    if other is not None:
        other_path = (base_dir / other).resolve()
        if not other_path.is_file():
            raise ConfigError(f"{key}.algorithm_from", f"twin file not found: {other_path}", "give another twin file")
        other = str(other_path)
    t.done()
    return TwinRef(str(profile), counts["draft_tokens"], counts["max_running_requests"], counts["kv_pool_tokens"],
                   other)


# A server's GPU telemetry: a target's keys, and a fleet node's
TELEMETRY_KEYS = (
    Key("telemetry", str, None, "the server's DCGM exporter, http://node:9400/metrics, read instead of NVML "
        "(docs/telemetry.md)", shown="NVML beside the server"),
    Key("telemetry_gpus", list, None, "the exporter's GPUs (indices or UUIDs) that serve it", shown="every one shown"),
)
TARGET = Keys("targets", "One server driven, a [[targets]] table each: exactly one of `url`, [targets.emulator] "
              "or [targets.twin].", (
    Key("name", str, REQUIRED, "the target's name in every table: letters, digits, . _ -"),
    Key("flavor", str, "auto", "the API: auto identifies the server", Choice(("auto", *FLAVORS), "flavor"),
        f"use auto or one of {', '.join(FLAVORS)}"),
    Key("url", str, None, "a running server's root, http://host:port"),
    Key("emulator", dict, None, "[targets.emulator]: an emulator loadgen launches; its keys are sglang.launch_server's "
        "flags without the dashes"),
    Key("twin", (dict, str), None, "[targets.twin]: a twin run in virtual time, or its file"),
    Key("node", str, "local", "the node the server runs on, as results name it"),
    Key("api_key_env", str, None, "the environment variable that holds the server's API key (never the key itself)"),
    Key("api_key_file", str, None, "a file that holds the key, read on the worker"),
    Key("model", str, None, "openai-*: the request's `model`", shown="the server's first (GET /v1/models)"),
    Key("continuous_usage", bool, True, "openai-*: ask for usage on every frame (per-frame token counts)"),
    Key("spec_details", bool, None, "openai-*: ask for SGLang's spec_tokens_details", shown="if SGLang >= 0.5.23"),
    *TELEMETRY_KEYS,
    Key("cost", dict, None, "[targets.cost]: this target's prices, key by key over [cost]"),
    Key("watch_twin", str, None, "a url or [emulator] target's own twin file, relative to the experiment file: "
        "every run checks the node against it (docs/twin.md)"),
))


@dataclass(frozen=True)
class TargetConfig:
    name: str
    flavor: str
    url: str | None                  # a running server, or None when loadgen launches an emulator
    emulator_args: tuple[str, ...]   # `python -m loadgen.emulator` flags (launch_server style), if launched
    node: str
    api_key_env: str | None
    api_key_file: str | None = None  # read on the worker; the key itself is never stored
    model: str | None = None         # openai-*: the `model` field; None = the first of GET /v1/models
    continuous_usage: bool = True    # openai-*: ask for usage on every frame (per-frame token counts)
    spec_details: bool | None = None  # openai-*: ask for SGLang's spec_tokens_details; None = if SGLang >= 0.5.23
    telemetry: str | None = None     # the server's DCGM exporter (http://node:9400/metrics); docs/telemetry.md
    telemetry_gpus: tuple[str, ...] | None = None   # the GPUs (index or UUID) that serve it; None: every one shown
    twin: TwinRef | None = None      # [targets.twin]: a twin run in virtual time instead of a server
    cost: Prices | None = None       # [cost] with this target's [targets.cost] over it, key by key; None: no prices
    watch_twin: str | None = None    # a measured target's own twin file: each level is checked against it (drift)


def parse_target(raw: Any, key: str, base_dir: Path, cost: dict | None = None) -> TargetConfig:
    """One [[targets]] table; `cost`: the file's [cost] table, which its own [targets.cost] overrides key by key."""
    t = StrictTable(raw, key, TARGET)
    name = check_name(t.read("name"), f"{key}.name")
    flavor = t.read("flavor")   # auto: the worker's preflight identifies the server (loadgen.servers.serverid)
    url, emulator, twin_table = t.read("url"), t.read("emulator"), t.read("twin")
    if [url, emulator, twin_table].count(None) != 2:
        raise ConfigError(key, "needs exactly one of `url` (a running server), [emulator] (launched by loadgen) or "
                          "[twin] (a twin file, predicted in virtual time)",
                          "set url = \"http://host:port\", or add a [targets.emulator] or [targets.twin] table")
    twin = None if twin_table is None else parse_twin_ref(twin_table, f"{key}.twin", base_dir)
    if url is not None:
        check_url(url, f"{key}.url")
        url = url.rstrip("/")
    args: tuple[str, ...] = ()
    if emulator is not None:
        args = emulator_args(emulator, f"{key}.emulator", base_dir)
        if "model-path" not in emulator:  # required by launch_server's flags; the emulator only reports it
            args += ("--model-path", "emulated/qwen3.8-27b-nvfp4")
        _check_emulator_flags(args, f"{key}.emulator")
    node, api_key_env, api_key_file = t.read("node"), t.read("api_key_env"), t.read("api_key_file")
    if api_key_env is not None and api_key_file is not None:
        raise ConfigError(f"{key}.api_key_file", "cannot be combined with api_key_env", "give the key one way")
    if api_key_file is not None:
        api_key_file = str((base_dir / api_key_file).resolve())  # read on the worker, at preflight
    openai = _openai_options(t, key, flavor)
    telemetry, gpus = telemetry_options(t, key)
    own_cost = t.read("cost")
    watch = watch_twin(t, key, base_dir, twin is None)
    t.done()
    prices = None if cost is None and own_cost is None else read_prices({**(cost or {}), **(own_cost or {})},
                                                                         f"{key}.cost")
    return TargetConfig(name, flavor, url, args, node, api_key_env, api_key_file, *openai, telemetry, gpus,
                        twin=twin, cost=prices, watch_twin=watch)


def watch_twin(t: StrictTable, key: str, base_dir: Path, measured: bool) -> str | None:
    """`watch_twin = "mtp.toml"`: the twin a measured target should match (resolved; the file must exist)."""
    raw = t.read("watch_twin")
    if raw is None:
        return None
    if not measured:
        raise ConfigError(f"{key}.watch_twin", "a twin target is the prediction itself: it watches no twin",
                          "give watch_twin to a url or [emulator] target")
    return twin_file(raw, f"{key}.watch_twin", base_dir)


def twin_file(raw: str, key: str, base_dir: Path) -> str:
    """A twin file named relative to the experiment file, resolved; it must exist."""
    path = (base_dir / raw).resolve()
    if not path.is_file():
        raise ConfigError(key, f"twin file not found: {path}",
                          "write one with `loadgen twin fit --results R --run ID -o FILE`")
    return str(path)


def telemetry_options(t: StrictTable, key: str) -> tuple[str | None, tuple[str, ...] | None]:
    """`telemetry`: a DCGM exporter's /metrics URL; `telemetry_gpus`: which of its GPUs serve the target."""
    url = t.read("telemetry")
    if url is not None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"{key}.telemetry", f"{url!r} is not an http:// URL",
                              "name the server's DCGM exporter, e.g. telemetry = \"http://10.0.0.11:9400/metrics\"")
    gpus = t.read("telemetry_gpus")
    if gpus is not None and (not gpus or not all(isinstance(g, (str, int)) and not isinstance(g, bool) for g in gpus)):
        raise ConfigError(f"{key}.telemetry_gpus", "must be a non-empty list of GPU indices or UUIDs",
                          "e.g. telemetry_gpus = [0] or [\"GPU-5c0f...\"]")
    return url, None if gpus is None else tuple(str(g) for g in gpus)

def _openai_options(t: StrictTable, key: str, flavor: str) -> tuple[str | None, bool, bool | None]:
    """model, continuous_usage, spec_details: request options of the openai-* flavours only."""
    if not flavor.startswith("openai-") and flavor != "auto":
        for name in ("model", "continuous_usage", "spec_details"):
            if name in t.data:
                raise ConfigError(f"{key}.{name}", f"only applies to openai-* flavors (flavor is {flavor!r})",
                                  "remove it, or set flavor = \"openai-completions\" / \"openai-chat\"")
    model = t.read("model")
    if model is not None and not model:
        raise ConfigError(f"{key}.model", "is empty", "leave it out to use the server's first model")
    return model, t.read("continuous_usage"), t.read("spec_details")


def check_url(url: str, key: str) -> None:
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ConfigError(key, f"{url!r} is not an http://host:port URL", "e.g. url = \"http://127.0.0.1:30000\"")
    try:
        _ = parts.port   # reading it raises ValueError on a bad port
    except ValueError as exc:
        raise ConfigError(key, f"bad port in {url!r}",
                          "a port is 1..65535, e.g. url = \"http://127.0.0.1:30000\"") from exc
    if parts.path not in ("", "/"):
        raise ConfigError(key, f"{url!r} has a path", "give the server root; the route comes from the flavor")


def emulator_args(table: dict, key: str, base_dir: Path) -> tuple[str, ...]:
    """[targets.emulator] keys are launch_server flags without the dashes: speculative-algorithm = "NEXTN"."""
    args: list[str] = []
    for flag, value in table.items():
        if flag in ("host", "port"):
            raise ConfigError(f"{key}.{flag}", "is chosen by loadgen", "remove it")
        if flag == "speculative-algorithm" and value not in EMULATOR_ALGORITHMS:
            raise ConfigError(f"{key}.{flag}", f"unknown algorithm {value!r}",
                              f"use one of {', '.join(EMULATOR_ALGORITHMS)}")
        if flag == "speculative-draft-model-path" and isinstance(value, str):
            value = str((base_dir / value).resolve())
        if is_secret_name(flag):   # api-key = { env = "VAR" } | { file = "path" }; a literal is refused
            args += [f"--{flag}", flag_ref(value, f"{key}.{flag}", base_dir)]
        elif isinstance(value, bool):
            if value:
                args.append(f"--{flag}")
        elif isinstance(value, (int, float, str)):
            args += [f"--{flag}", str(value)]
        else:
            raise ConfigError(f"{key}.{flag}", f"must be a string, number or boolean, got {type(value).__name__}")
    return tuple(args)


def _check_emulator_flags(args: tuple[str, ...], key: str) -> None:
    """Parse the flags with the emulator's own parser now, so a typo fails before any server starts."""
    from loadgen.emulator.args import build_parser

    parser = build_parser()
    parser.allow_abbrev = False  # a misspelt flag must not pass as an abbreviation of a real one

    def error(message: str) -> NoReturn:
        raise ConfigError(key, f"the emulator rejects these flags: {message}",
                          "see python -m loadgen.emulator --help (keys are its flags without the dashes)")

    parser.error = error  # type: ignore[method-assign]
    parser.parse_args([*args, "--host", "127.0.0.1", "--port", "1"])
