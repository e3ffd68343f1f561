"""Fleet files: the nodes (how Ray finds each), and the server configurations (launch profiles,
`infra/profiles/*.toml`) an experiment's [fleet] sweeps; every configuration is one stage of the run, its
servers restarted before it. Parsing only: placing actors on the nodes is loadgen.driver.placement's job."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from loadgen.config.tables import check_name, load_toml
from loadgen.config.targets import (
    FLAVORS,
    TELEMETRY_KEYS,
    TargetConfig,
    check_url,
    emulator_args,
    telemetry_options,
    twin_file,
)
from loadgen.errors import ConfigError
from loadgen.keys import REQUIRED, Bounds, Choice, Key, Keys, StrictTable

# The shipped launch profiles: package data, `loadgen/config/profiles` (a link to infra/profiles in a checkout)
PROFILES_DIR = Path(str(resources.files("loadgen.config") / "profiles"))
LAUNCHES = ("sglang", "emulator", "external")
FLEET = Keys("fleet", "A fleet instead of [[targets]] (docs/fleets.md): `file` names a fleet file whose [fleet] "
             "takes these keys too; the ones written here win.", (
    Key("file", str, None, "the fleet file, relative to the experiment file"),
    Key("name", str, "fleet", "the fleet's name"),
    Key("flavor", str, "sglang", "the servers' API", Choice(FLAVORS, "flavor"), f"use one of {', '.join(FLAVORS)}"),
    Key("launch", str, "sglang", "who starts the servers: sglang or the emulator on each node, or external (already "
        "running at the nodes' urls)", Choice(LAUNCHES, "launch"), f"use one of {', '.join(LAUNCHES)}"),
    Key("workers", str, "server", "where the load workers run: server (the server's node, loopback) or client "
        "(the client nodes)", Choice(("server", "client"), "placement"),
        "use \"server\" (workers on the server's node, loopback) or \"client\" (client nodes)"),
    Key("nodes", list, REQUIRED, "[[fleet.nodes]]: the server nodes"),
    Key("clients", list, [], "[[fleet.clients]]: nodes that run only workers (workers = \"client\")"),
    Key("health_timeout_s", float, 1800.0, "how long a launched server may take to answer its health check",
        Bounds(0, above=True), shown="1800.0 (sglang), else 60.0"),
    Key("server_resources", dict, {}, "Ray resources each server actor asks for, name = amount"),
    Key("profiles_dir", str, None, "where the launch profiles are, relative to the fleet file",
        shown="the shipped infra/profiles"),
    Key("replace", dict, {}, "flags replaced in every profile that sets them (e.g. where this fleet keeps models)"),
    Key("profiles", list, None, "the launch profiles swept, a stage each (or [[fleet.configurations]])"),
    Key("configurations", list, None, "[[fleet.configurations]]: each stage's profile per node"),
))
FLEET_NODE = Keys("fleet.nodes", "A node of the fleet, a [[fleet.nodes]] (or [[fleet.clients]]) table each: "
                  "exactly one of node_ip, resource or labels says how Ray finds it.", (
    Key("name", str, REQUIRED, "the node's name: letters, digits, . _ -"),
    Key("node_ip", str, None, "the node's IP as Ray knows it"),
    Key("resource", str, None, "a custom Ray resource only this node has"),
    Key("labels", dict, None, "Ray node labels that pick this node"),
    Key("url", str, None, "the server as the workers reach it", shown="loopback, a port loadgen picks"),
    Key("flags", dict, {}, "extra server flags for this node"),
    Key("api_key_env", str, None, "the environment variable that holds the server's API key"),
    *TELEMETRY_KEYS,
))
FLEET_CONFIGURATION = Keys("fleet.configurations", "A stage: every node's launch profile; its servers run only "
                           "during the stage.", (
    Key("profile", str, None, "the launch profile of every node not in `nodes`"),
    Key("nodes", dict, {}, "node name -> its launch profile"),
    Key("name", str, None, "the stage's name", shown="the profile's name"),
    Key("watch_twin", str, None, "each node's own twin of this configuration, relative to the experiment file, "
        "`{node}` standing for the node's name (\"twins/{node}-mtp.toml\"): a node off it is named (docs/twin.md)"),
))


@dataclass(frozen=True)
class Locator:
    """How Ray finds a node: exactly one of its IP, a custom resource, or node labels."""

    node_ip: str | None = None
    resource: str | None = None
    labels: tuple[tuple[str, str], ...] = ()

    def describe(self) -> str:
        if self.node_ip:
            return f"node IP {self.node_ip}"
        if self.resource:
            return f"custom resource {self.resource!r}"
        return "labels " + ", ".join(f"{k}={v}" for k, v in self.labels)

    def matches(self, node: dict) -> bool:
        if self.node_ip:
            return node.get("NodeManagerAddress") == self.node_ip
        if self.resource:
            return node.get("Resources", {}).get(self.resource, 0) > 0
        labels = node.get("Labels", {})
        return all(labels.get(k) == v for k, v in self.labels)


@dataclass(frozen=True)
class FleetNode:
    name: str
    locator: Locator
    url: str | None                  # the server endpoint as the workers see it; None: loopback, port by loadgen
    flags: dict[str, Any]            # extra server flags for this node (e.g. time-scale on an emulated node)
    api_key_env: str | None = None
    telemetry: str | None = None     # the node's DCGM exporter, read instead of NVML (docs/telemetry.md)
    telemetry_gpus: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Profile:
    """A named SGLang launch configuration (`infra/profiles/<name>.toml`)."""

    name: str
    description: str
    flags: dict[str, Any]            # launch_server flags without the dashes
    expect_draft: str | None         # dflash1 | dflash2: the draft must be this kind or the run stops
    source: str


@dataclass(frozen=True)
class Stage:
    """One server configuration: every node's profile; its servers run only during this stage."""

    name: str
    profiles: dict[str, Profile]     # node name -> profile (external servers: empty)
    flags: dict[str, dict[str, Any]]  # node name -> its launch flags (profile + replacements + node flags)
    targets: tuple[TargetConfig, ...]


@dataclass(frozen=True)
class Fleet:
    name: str
    launch: str                      # sglang | emulator | external (already running at the nodes' urls)
    workers: str                     # server: workers on the server's node | client: on the client nodes
    nodes: tuple[FleetNode, ...]
    clients: tuple[FleetNode, ...]
    health_timeout_s: float
    server_resources: dict[str, float]
    stages: tuple[Stage, ...]

    def all_targets(self) -> tuple[TargetConfig, ...]:
        return tuple(t for s in self.stages for t in s.targets)


def parse_fleet(raw: Any, base_dir: Path) -> Fleet:
    """The experiment's [fleet] table: `file` (the fleet file, relative to the experiment) and/or inline fleet
    keys (these win), plus `profiles` or [[fleet.configurations]]."""
    table = StrictTable(raw, "fleet", FLEET)
    file = table.read("file")
    merged: dict[str, Any] = {}
    fleet_dir = base_dir
    if file is not None:
        path = (base_dir / file).resolve()
        data = load_toml(path, "fleet.file", "give the fleet .toml path relative to the experiment file, "
                         "e.g. ../../infra/fleet-emulated.toml")
        top = StrictTable(data, "")
        merged = dict(StrictTable(top.get("fleet", dict), "fleet").data)
        top.done()
        fleet_dir = path.parent
    merged.update({k: v for k, v in table.data.items() if k != "file"})
    return _parse_merged(StrictTable(merged, "fleet", FLEET), fleet_dir, base_dir)


def _parse_merged(t: StrictTable, fleet_dir: Path, base_dir: Path) -> Fleet:
    name, flavor, launch, workers = t.read("name"), t.read("flavor"), t.read("launch"), t.read("workers")
    nodes = tuple(_parse_node(n, f"fleet.nodes[{i}]", launch, fleet_dir) for i, n in enumerate(t.read("nodes")))
    clients = tuple(_parse_node(n, f"fleet.clients[{i}]", "client", fleet_dir)
                    for i, n in enumerate(t.read("clients")))
    _unique([n.name for n in nodes + clients], "fleet.nodes", "node")
    if not nodes:
        raise ConfigError("fleet.nodes", "is empty", "add at least one [[fleet.nodes]] table")
    if workers == "client":
        if not clients:
            raise ConfigError("fleet.clients", "is empty but workers = \"client\"", "add [[fleet.clients]] nodes")
        for i, n in enumerate(nodes):
            if n.url is None:
                raise ConfigError(f"fleet.nodes[{i}].url", "is required when workers run on client nodes",
                                  "give the server's network address, e.g. url = \"http://10.0.0.11:30000\"")
    elif clients:
        raise ConfigError("fleet.clients", "given but workers = \"server\"", "set workers = \"client\" or remove them")
    timeout = t.read("health_timeout_s", 1800.0 if launch == "sglang" else 60.0)
    resources = t.read("server_resources")
    for key, value in resources.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
            raise ConfigError(f"fleet.server_resources.{key}", f"must be a number > 0, got {value!r}")
    profiles_dir = (fleet_dir / t.read("profiles_dir", str(PROFILES_DIR))).resolve()
    replace = _resolve_paths(t.read("replace"), fleet_dir)
    stages = _parse_stages(t, nodes, launch, profiles_dir, replace, base_dir, flavor)
    t.done()
    return Fleet(name, launch, workers, nodes, clients, timeout, {k: float(v) for k, v in resources.items()}, stages)


def _parse_node(raw: Any, key: str, launch: str, fleet_dir: Path) -> FleetNode:
    t = StrictTable(raw, key, FLEET_NODE)
    name = check_name(t.read("name"), f"{key}.name")
    node_ip, resource, labels = t.read("node_ip"), t.read("resource"), t.read("labels")
    if sum(x is not None for x in (node_ip, resource, labels)) != 1:
        raise ConfigError(key, "needs exactly one of node_ip, resource or labels (how Ray finds the node)",
                          "e.g. resource = \"spark1\" with `ray start --resources='{\"spark1\": 1}'` on that node")
    if labels is not None and (not labels or not all(isinstance(v, str) for v in labels.values())):
        raise ConfigError(f"{key}.labels", "must be a non-empty table of strings",
                          "labels = { \"loadgen-node\" = \"spark1\" }")
    url = t.read("url")
    if url is not None:
        check_url(url, f"{key}.url")
        url = url.rstrip("/")
    elif launch == "external":
        raise ConfigError(f"{key}.url", "is required for launch = \"external\"", "give the running server's URL")
    if launch == "client" and url is not None:
        raise ConfigError(f"{key}.url", "a client node runs workers, not a server", "remove it")
    flags = _resolve_paths(t.read("flags"), fleet_dir)
    api_key_env = t.read("api_key_env")
    telemetry, gpus = telemetry_options(t, key)
    t.done()
    locator = Locator(node_ip, resource, tuple(sorted((labels or {}).items())))
    return FleetNode(name, locator, url, flags, api_key_env, telemetry, gpus)


def _parse_stages(t: StrictTable, nodes: tuple[FleetNode, ...], launch: str, profiles_dir: Path, replace: dict,
                  base_dir: Path, flavor: str) -> tuple[Stage, ...]:
    shorthand, tables = t.read("profiles"), t.read("configurations")
    if launch == "external":
        if shorthand or tables:
            raise ConfigError("fleet.profiles", "servers are external (already running): nothing to launch",
                              "remove profiles/configurations, or set launch = \"sglang\"/\"emulator\"")
        targets = tuple(TargetConfig(n.name, flavor, n.url, (), n.name, n.api_key_env, telemetry=n.telemetry,
                                     telemetry_gpus=n.telemetry_gpus) for n in nodes)
        return (Stage("external", {}, {}, targets),)
    if (shorthand is None) == (tables is None):
        raise ConfigError("fleet.profiles", "give exactly one of `profiles = [...]` or [[fleet.configurations]]",
                          "e.g. profiles = [\"dflash2-b4\", \"dflash2-b6\", \"dflash2-b8\"]")
    raw = [{"profile": p} for p in shorthand] if shorthand is not None else tables
    if not raw:
        raise ConfigError("fleet.profiles", "is empty", "list at least one launch profile")
    key_of = "fleet.profiles[{}]" if shorthand is not None else "fleet.configurations[{}]"
    cache: dict[str, Profile] = {}
    stages = []
    for i, entry in enumerate(raw):
        key = key_of.format(i)
        c = StrictTable(entry, key, FLEET_CONFIGURATION)
        default = c.read("profile")
        per_node = c.read("nodes")
        stage_name = c.read("name", default)
        watch = c.read("watch_twin")
        c.done()
        check_name(stage_name, f"{key}.name", ": name the configuration")
        unknown = sorted(set(per_node) - {n.name for n in nodes})
        if unknown:
            raise ConfigError(f"{key}.nodes.{unknown[0]}", "is not a fleet node",
                              f"fleet nodes: {', '.join(n.name for n in nodes)}")
        profiles = {}
        for n in nodes:
            pname = per_node.get(n.name, default)
            if pname is None:
                raise ConfigError(f"{key}.nodes.{n.name}", "no profile for this node", "set `profile` for every node")
            if pname not in cache:
                cache[pname] = load_profile(pname, profiles_dir, f"{key}.profile")
            profiles[n.name] = cache[pname]
        flags = {n.name: _flags(n, profiles[n.name], replace) for n in nodes}
        targets = tuple(TargetConfig(f"{n.name}.{stage_name}", flavor, None,
                                     emulator_args(flags[n.name], f"fleet.nodes.{n.name}.flags", base_dir),
                                     n.name, n.api_key_env, telemetry=n.telemetry, telemetry_gpus=n.telemetry_gpus,
                                     watch_twin=None if watch is None else
                                     twin_file(watch.replace("{node}", n.name), f"{key}.watch_twin", base_dir))
                        for n in nodes)
        stages.append(Stage(stage_name, profiles, flags, targets))
    _unique([s.name for s in stages], "fleet.configurations", "configuration")
    return tuple(stages)


def _flags(node: FleetNode, profile: Profile, replace: dict) -> dict[str, Any]:
    """A node's launch flags in a stage: the profile's, the fleet's replacements (only for flags the profile
    sets, e.g. where this fleet keeps the models) and the node's extra flags."""
    flags = dict(profile.flags)
    flags.update({k: v for k, v in replace.items() if k in flags})
    flags.update(node.flags)
    return flags


def _resolve_paths(flags: dict[str, Any], base: Path) -> dict[str, Any]:
    """Relative model/draft paths are relative to the file that names them."""
    out = dict(flags)
    for key in ("model-path", "speculative-draft-model-path"):
        value = out.get(key)
        if isinstance(value, str) and value.startswith("."):
            out[key] = str((base / value).resolve())
    return out


def load_profile(name: str, profiles_dir: Path, key: str = "profile", _seen: tuple[str, ...] = ()) -> Profile:
    """`name` is a profile in `profiles_dir` (without .toml) or a path to a profile file. `extends = "base"`
    starts from another profile's flags (the shared flags are written, and commented, once)."""
    path = Path(name) if name.endswith(".toml") else profiles_dir / f"{name}.toml"
    if str(path) in _seen:
        raise ConfigError(key, f"profiles extend each other in a loop: {' -> '.join(_seen + (str(path),))}")
    if not path.is_file():
        known = sorted(p.stem for p in profiles_dir.glob("*.toml")) if profiles_dir.is_dir() else []
        raise ConfigError(key, f"no launch profile {name!r} ({path})", f"known profiles: {', '.join(known) or 'none'}")
    t = StrictTable(load_toml(path, key), "")
    description = t.get("description", str, "")
    extends = t.get("extends", str, None)
    if extends:   # a profile beside this one, else a shipped one
        here = path.parent if (path.parent / f"{extends}.toml").is_file() else profiles_dir
        base = load_profile(extends, here, f"{path}:extends", _seen + (str(path),)).flags
    else:
        base = {}
    expect = t.get("expect_draft", str, None)
    if expect not in (None, "dflash1", "dflash2"):
        raise ConfigError(f"{path}:expect_draft", f"unknown draft kind {expect!r}", "use \"dflash1\" or \"dflash2\"")
    flags = dict(base, **_resolve_paths(t.get("flags", dict), path.parent))
    t.done()
    if "model-path" not in flags:
        raise ConfigError(f"{path}:flags.model-path", "is required", "every launch needs the target model")
    return Profile(path.stem, description, flags, expect, str(path))


def _unique(names: list[str], key: str, what: str) -> None:
    for i, n in enumerate(names):
        if names.index(n) != i:
            raise ConfigError(key, f"duplicate {what} name {n!r}", f"give every {what} a unique name")
