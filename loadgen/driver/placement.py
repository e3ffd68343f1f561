"""Where a fleet's actors run: every node resolved against the live Ray cluster, then each target's server and
workers pinned to it with Ray's own scheduling (hard node affinity for an IP, a sliver of the node's custom
resource, or a label selector), and each DFLASH draft checked on its node, all before any load."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from loadgen.config import Fleet, Locator, TargetConfig
from loadgen.driver import stop
from loadgen.emulator.args import build_parser as emulator_parser
from loadgen.errors import LoadgenError
from loadgen.servers import draftcheck
from loadgen.values import counted

RESOURCE_SLIVER = 0.01     # what each pinned actor takes of a node's custom resource (100 actors per node)


def pin_options(locator: Locator, node_id: str) -> dict:
    """Ray actor options that pin to this node, in the locator's own terms."""
    if locator.resource:
        return {"resources": {locator.resource: RESOURCE_SLIVER}}
    if locator.labels:
        return {"label_selector": dict(locator.labels)}
    return {"scheduling_strategy": NodeAffinitySchedulingStrategy(node_id, soft=False)}


def _describe_node(n: dict) -> str:
    """A live Ray node as an error message lists it: address, custom resources, user labels."""
    resources = sorted(k for k in n.get("Resources", {}) if not k.startswith("node:"))
    labels = {k: v for k, v in n.get("Labels", {}).items() if not k.startswith("ray.io/")}
    return f"{n['NodeManagerAddress']} (resources {resources}, labels {labels})"


def resolve_nodes(fleet: Fleet, ray_nodes: list[dict]) -> dict[str, str]:
    """Fleet node name -> Ray node id, checked against the live cluster; LoadgenError before any load when a
    node is missing, ambiguous, shared, or lacks the server's resources."""
    alive = [n for n in ray_nodes if n.get("Alive")]
    seen = ", ".join(_describe_node(n) for n in alive)
    out: dict[str, str] = {}
    for node in fleet.nodes + fleet.clients:
        found = [n for n in alive if node.locator.matches(n)]
        if not found:
            raise LoadgenError(f"fleet node {node.name}: no live Ray node has {node.locator.describe()} (alive: "
                               f"{seen or 'none'}); start Ray on it with that resource/label, or fix the fleet file")
        if len(found) > 1:
            raise LoadgenError(f"fleet node {node.name}: {node.locator.describe()} matches {len(found)} Ray nodes; "
                               "give each node a unique custom resource or label")
        ray_node = found[0]
        if node in fleet.nodes:
            for res, amount in fleet.server_resources.items():
                have = ray_node.get("Resources", {}).get(res, 0)
                if have < amount:
                    raise LoadgenError(f"fleet node {node.name}: its Ray node has {have:g} {res}, the server "
                                       f"needs {amount:g} (fleet.server_resources); start Ray there with "
                                       "--num-gpus/--resources")
        out[node.name] = ray_node["NodeID"]
    shared = [name for name, nid in out.items() if list(out.values()).count(nid) > 1]
    if shared:
        raise LoadgenError(f"fleet nodes {', '.join(shared)} are the same Ray node; "
                           "each fleet node must be its own node")
    return out


class LocalPlacement:
    """Experiments without a fleet: actors go wherever Ray puts them, servers are emulators."""

    health_timeout_s = 60.0

    def prepare(self, stages: list[tuple[TargetConfig, ...]], log: Callable[[str], None]) -> None:
        """Nothing to resolve or check."""

    def server_options(self, target: TargetConfig) -> dict:
        return {}

    def worker_options(self, target: TargetConfig, index: int) -> dict:
        return {}

    def launch(self, server: Any, target: TargetConfig) -> Any:
        return server.start_emulator.remote(list(target.emulator_args), self.health_timeout_s)

    def sampler_options(self, target: TargetConfig, server: Any) -> dict:
        """The GPU sampler goes where the target's server runs: beside the server actor loadgen launched, else
        on the driver's node (a url target read on this machine: loopback, or its named exporter)."""
        node_id = ray.get(server.node_id.remote()) if server is not None else ray.get_runtime_context().get_node_id()
        return {"scheduling_strategy": NodeAffinitySchedulingStrategy(node_id, soft=False)}

    def on_fleet_node(self, target: TargetConfig) -> bool:
        """Whether the target's server runs on a fleet node (which its sampler reads through NVML)."""
        return False

    def verify(self, targets: list[tuple[TargetConfig, list]], servers: dict[str, Any],
               log: Callable[[str], None]) -> None:
        """Nothing was pinned."""


class FleetPlacement(LocalPlacement):
    """Pins every target's server and workers to its fleet node; launches SGLang or the emulator there."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self.health_timeout_s = fleet.health_timeout_s
        self.node_ids: dict[str, str] = {}
        self.nodes = {n.name: n for n in fleet.nodes + fleet.clients}

    def prepare(self, stages: list[tuple[TargetConfig, ...]], log: Callable[[str], None]) -> None:
        """Resolve the nodes, then check every DFLASH profile's draft on its own node: all before any load."""
        self.node_ids = resolve_nodes(self.fleet, ray.nodes())
        log("fleet nodes: " + ", ".join(f"{name} = Ray node {node_id[:12]} ({self.nodes[name].locator.describe()})"
                                        for name, node_id in self.node_ids.items()))
        checks = {}
        for stage in self.fleet.stages:
            for node_name, profile in stage.profiles.items():
                flags = stage.flags[node_name]
                if str(flags.get("speculative-algorithm", "")).upper() == "DFLASH":
                    task = _check_draft_on_node.options(num_cpus=0, **self._pin(node_name))
                    ref = task.remote(flags.get("speculative-draft-model-path"), flags)
                    checks[(stage.name, node_name)] = (profile, ref)
        reports = {key: (profile, stop.get(ref, timeout_s=60)) for key, (profile, ref) in checks.items()}
        said: dict[tuple[str, tuple[str, ...]], list[str]] = {}   # a report is said once for the nodes sharing it
        for (stage_name, node_name), (_, report) in reports.items():
            said.setdefault((stage_name, tuple(report.lines())), []).append(node_name)
        for (stage_name, lines), nodes in said.items():
            for line in lines:
                log(f"check-draft [{stage_name} on {', '.join(nodes)}] {line}")
        for (stage_name, node_name), (profile, report) in reports.items():
            expected = profile.expect_draft
            if report.problems or (expected and report.kind != expected):
                why = ("; ".join(report.problems)
                       or f"the draft is {report.kind}, profile {profile.name} expects {expected}")
                raise LoadgenError(f"configuration {stage_name}, node {node_name}, profile {profile.name}: draft "
                                   f"check failed: {why} (run `loadgen check-draft` on the draft, fix the profile)")

    def verify(self, targets: list[tuple[TargetConfig, list]], servers: dict[str, Any],
               log: Callable[[str], None]) -> None:
        """Ask every placed actor where it runs: a worker or server off its node stops the run before load.
        Said in one line: the nodes the actors run on, with their Ray node ids."""
        used: dict[str, str] = {}
        for target, workers in targets:
            where = ray.get([w.node_id.remote() for w in workers]
                            + ([servers[target.name].node_id.remote()] if target.name in servers else []))
            nodes = [self._worker_node(target, i) for i in range(len(workers))]
            nodes += [target.node] if target.name in servers else []
            if where != [self.node_ids[n] for n in nodes]:
                raise LoadgenError(f"target {target.name}: actors landed on Ray nodes {where}, expected "
                                   f"{[self.node_ids[n] for n in nodes]}; the fleet's resources/labels do not "
                                   "single out one node each")
            used.update(zip(nodes, where))
        log(f"placed {counted(len(targets), 'target')}, every worker and server on its node: "
            + ", ".join(f"{name} = Ray node {node_id[:12]}" for name, node_id in used.items()))

    def _pin(self, node_name: str) -> dict:
        return pin_options(self.nodes[node_name].locator, self.node_ids[node_name])

    def server_options(self, target: TargetConfig) -> dict:
        options = self._pin(target.node)
        if self.fleet.server_resources:
            options["resources"] = dict(options.get("resources", {}), **self.fleet.server_resources)
        return options

    def worker_options(self, target: TargetConfig, index: int) -> dict:
        return self._pin(self._worker_node(target, index))

    def sampler_options(self, target: TargetConfig, server: Any) -> dict:
        """A fleet node samples itself: the sampler is pinned to the target's node like its server."""
        return self._pin(target.node)

    def on_fleet_node(self, target: TargetConfig) -> bool:
        return target.node in self.node_ids

    def _worker_node(self, target: TargetConfig, index: int) -> str:
        """The server's own node, or the client nodes round-robin (by server node, then worker)."""
        if self.fleet.workers == "server":
            return target.node
        position = [n.name for n in self.fleet.nodes].index(target.node)
        clients = self.fleet.clients
        return clients[(position + index) % len(clients)].name

    def launch(self, server: Any, target: TargetConfig) -> Any:
        url = self.nodes[target.node].url
        host, port = (urlsplit(url).hostname, urlsplit(url).port or 80) if url else ("127.0.0.1", 0)
        if self.fleet.launch == "sglang":
            return server.start_server.remote("sglang.launch_server", list(target.emulator_args), host,
                                              port or 30000, self.health_timeout_s)
        return server.start_server.remote("loadgen.emulator", emulator_flags(target.emulator_args), host, port,
                                          self.health_timeout_s)


@ray.remote
def _check_draft_on_node(path: str | None, flags: dict) -> draftcheck.DraftReport:
    """Runs on the server's node: the draft folder is local to it."""
    return draftcheck.check_draft(path or "<no --speculative-draft-model-path>", flags)


def emulator_flags(args: tuple[str, ...]) -> list[str]:
    """The launch args the emulator understands: SGLang-only flags (memory, kernels, quantisation) have no
    meaning in its cost model and are dropped, so one profile drives both."""
    known = {o for a in emulator_parser()._actions for o in a.option_strings}
    out, keep = [], False
    for arg in args:
        if arg.startswith("--"):
            keep = arg in known
        if keep:
            out.append(arg)
    return out


def placement_for(fleet: Fleet | None) -> LocalPlacement:
    return FleetPlacement(fleet) if fleet is not None else LocalPlacement()

