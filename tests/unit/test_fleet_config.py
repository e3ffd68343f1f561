"""Fleet config, profiles and node resolution without a cluster; a server dies with its actor."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadgen.config import PROFILES_DIR, Locator, load_experiment, load_profile, parse_experiment, parse_fleet
from loadgen.driver.placement import FleetPlacement, emulator_flags, resolve_nodes
from loadgen.errors import ConfigError, LoadgenError

REPO = Path(__file__).parents[2]
NODES = [{"name": "a", "resource": "a"}, {"name": "b", "labels": {"loadgen-node": "b"}},
         {"name": "c", "node_ip": "10.0.0.3"}]


def _fleet(**change):
    """The test fleet with some keys changed (None: removed)."""
    data = dict({"launch": "emulator", "nodes": NODES, "profiles": ["mtp"]}, **change)
    return parse_fleet({k: v for k, v in data.items() if v is not None}, REPO)


def _ray_node(node_id: str, ip: str = "10.0.0.9", resources=None, labels=None) -> dict:
    return {"NodeID": node_id, "Alive": True, "NodeManagerAddress": ip, "Resources": resources or {"CPU": 2.0},
            "Labels": labels or {}}


CLUSTER = [_ray_node("n1", resources={"CPU": 2.0, "a": 1.0, "GPU": 1.0}),
           _ray_node("n2", labels={"loadgen-node": "b"}, resources={"CPU": 2.0, "GPU": 1.0}),
           _ray_node("n3", ip="10.0.0.3", resources={"CPU": 2.0})]


def test_shipped_experiments_and_fleets_parse():
    exp = load_experiment(REPO / "jobs/experiments/draft-budget-sweep.toml")
    assert [s.name for s in exp.fleet.stages] == ["mtp", "dflash2-b4", "dflash2-b6", "dflash2-b8"]
    assert len(exp.targets) == 12 and {t.node for t in exp.targets} == {"spark1", "spark2", "spark3"}
    b4 = exp.fleet.stages[1].flags["spark3"]
    assert b4["speculative-num-draft-tokens"] == 4 and b4["time-scale"] == 0.8
    assert b4["speculative-draft-model-path"] == str(REPO / "loadgen/emulator/drafts/dflash2")   # fleet.replace
    spark = parse_fleet({"file": "infra/fleet-spark.toml", "profiles": ["dflash2-b8"]}, REPO)
    assert spark.launch == "sglang" and spark.server_resources == {"GPU": 1.0}
    assert spark.stages[0].flags["spark1"]["speculative-draft-model-path"] == "/models/Qwen3.8-27B-DFlash2"


def test_every_profile_extends_the_commented_base():
    base = load_profile("none", PROFILES_DIR).flags
    for path in PROFILES_DIR.glob("*.toml"):
        profile = load_profile(path.stem, PROFILES_DIR)
        assert base.items() <= profile.flags.items(), path
        flag_lines = [line for line in path.read_text().splitlines()
                      if "=" in line and not line.startswith(("#", " ", "description", "extends", "expect_draft"))]
        assert flag_lines and all("#" in line for line in flag_lines), path   # every flag has its comment


def test_configurations_give_each_node_its_profile():
    fleet = _fleet(profiles=None, configurations=[{"name": "mixed", "profile": "mtp", "nodes": {"c": "none"}}])
    stage = fleet.stages[0]
    assert {n: p.name for n, p in stage.profiles.items()} == {"a": "mtp", "b": "mtp", "c": "none"}
    assert [t.name for t in stage.targets] == ["a.mixed", "b.mixed", "c.mixed"]


@pytest.mark.parametrize("change,key,word", [
    ({"nodes": [{"name": "a"}]}, "fleet.nodes[0]", "exactly one of node_ip, resource or labels"),
    ({"nodes": [{"name": "a", "resource": "a", "node_ip": "1.2.3.4"}]}, "fleet.nodes[0]", "exactly one"),
    ({"nodes": [{"name": "a", "resource": "a"}, {"name": "a", "resource": "b"}]}, "fleet.nodes", "duplicate"),
    ({"nodes": [{"name": "a", "resource": "a", "gpu": 1}]}, "fleet.nodes[0].gpu", "unknown key"),
    ({"profiles": ["nope"]}, "fleet.profiles[0].profile", "no launch profile"),
    ({"profiles": []}, "fleet.profiles", "is empty"),
    ({"profiles": ["mtp", "mtp"]}, "fleet.configurations", "duplicate configuration"),
    ({"profiles": None, "configurations": [{"profile": "mtp", "nodes": {"zz": "none"}}]},
     "fleet.configurations[0].nodes.zz", "not a fleet node"),
    ({"profiles": None}, "fleet.profiles", "exactly one of"),
    ({"workers": "client"}, "fleet.clients", "is empty"),
    ({"workers": "client", "clients": [{"name": "w", "resource": "w"}]}, "fleet.nodes[0].url", "client nodes"),
    ({"launch": "external"}, "fleet.nodes[0].url", "required"),
    ({"launch": "docker"}, "fleet.launch", "unknown launch"),
    ({"server_resources": {"GPU": 0}}, "fleet.server_resources.GPU", "> 0"),
])
def test_bad_fleets_name_the_key(change, key, word):
    with pytest.raises(ConfigError) as err:
        _fleet(**change)
    assert err.value.key == key and word in str(err.value), str(err.value)


def test_fleet_and_targets_do_not_mix():
    with pytest.raises(ConfigError, match="cannot be combined"):
        parse_experiment({"load": {"concurrency": [1]}, "targets": [{"name": "x", "url": "http://127.0.0.1:1"}],
                          "fleet": {"launch": "emulator", "nodes": NODES, "profiles": ["mtp"]}}, REPO)


def test_resolve_nodes_by_resource_label_and_ip():
    assert resolve_nodes(_fleet(server_resources={"CPU": 1}), CLUSTER) == {"a": "n1", "b": "n2", "c": "n3"}


@pytest.mark.parametrize("cluster,fleet_change,word", [
    (CLUSTER[:2], {}, "fleet node c: no live Ray node has node IP 10.0.0.3"),
    (CLUSTER[:2] + [dict(CLUSTER[2], Alive=False)], {}, "no live Ray node"),
    (CLUSTER + [_ray_node("n4", ip="10.0.0.3")], {}, "matches 2 Ray nodes"),
    (CLUSTER, {"server_resources": {"GPU": 1}}, "fleet node c: its Ray node has 0 GPU"),
    ([dict(CLUSTER[0], Labels={"loadgen-node": "b"}), CLUSTER[2]], {}, "are the same Ray node"),
])
def test_resolve_nodes_fails_before_any_load(cluster, fleet_change, word):
    with pytest.raises(LoadgenError, match=word):
        resolve_nodes(_fleet(**fleet_change), cluster)


def test_placement_uses_rays_own_strategies():
    placement = FleetPlacement(_fleet(server_resources={"GPU": 1}))
    placement.node_ids = {"a": "a1" * 28, "b": "b2" * 28, "c": "c3" * 28}
    a, b, c = placement.fleet.stages[0].targets
    assert placement.server_options(a) == {"resources": {"a": 0.01, "GPU": 1.0}}
    assert placement.worker_options(b, 0) == {"label_selector": {"loadgen-node": "b"}}
    strategy = placement.worker_options(c, 0)["scheduling_strategy"]
    assert (strategy.node_id, strategy.soft) == ("c3" * 28, False)
    assert Locator(resource="a").describe() == "custom resource 'a'"


def test_workers_on_client_nodes_round_robin():
    nodes = [dict(n, url=f"http://10.0.0.{i}:30000") for i, n in enumerate(NODES, 1)]
    fleet = _fleet(nodes=nodes, workers="client",
                   clients=[{"name": "w1", "resource": "w1"}, {"name": "w2", "resource": "w2"}])
    placement = FleetPlacement(fleet)
    placement.node_ids = dict.fromkeys(["a", "b", "c", "w1", "w2"], "")   # resource locators need no id
    a, b, _ = fleet.stages[0].targets
    assert [placement.worker_options(a, i)["resources"] for i in range(2)] == [{"w1": 0.01}, {"w2": 0.01}]
    assert placement.worker_options(b, 0)["resources"] == {"w2": 0.01}


def test_emulator_gets_the_profile_minus_sglang_only_flags():
    args = _fleet().stages[0].targets[0].emulator_args
    assert "--quantization" in args and "--enable-linear-replayssm-spec" in args
    kept = emulator_flags(args)
    assert "--quantization" not in kept and "modelopt_fp4" not in kept and "--enable-linear-replayssm-spec" not in kept
    assert kept[kept.index("--speculative-num-draft-tokens") + 1] == "4" and "--enable-metrics" in kept


def test_profile_extends_loop_is_an_error(tmp_path):
    (tmp_path / "x.toml").write_text('extends = "y"\n[flags]\nmodel-path = "m"\n')
    (tmp_path / "y.toml").write_text('extends = "x"\n[flags]\nmodel-path = "m"\n')
    with pytest.raises(ConfigError, match="loop"):
        load_profile("x", tmp_path)


def test_a_configuration_watches_each_nodes_own_twin(tmp_path):
    """`watch_twin` with `{node}`: each node's target watches its own file, relative to the experiment; a node
    without one stops the parse, naming the configuration's key and the missing file."""
    for node in ("a", "b", "c"):
        (tmp_path / f"{node}-mtp.toml").write_text("")
    fleet = parse_fleet({"launch": "emulator", "nodes": NODES,
                         "configurations": [{"profile": "mtp", "watch_twin": "{node}-mtp.toml"}, {"profile": "none"}]},
                        tmp_path)
    assert [t.watch_twin for t in fleet.stages[0].targets] == [str(tmp_path / f"{n}-mtp.toml") for n in "abc"]
    assert [t.watch_twin for t in fleet.stages[1].targets] == [None, None, None]
    (tmp_path / "c-mtp.toml").unlink()
    with pytest.raises(ConfigError, match=r"fleet\.configurations\[0\]\.watch_twin.*not found: .*c-mtp\.toml"):
        parse_fleet({"launch": "emulator", "nodes": NODES,
                     "configurations": [{"profile": "mtp", "watch_twin": "{node}-mtp.toml"}]}, tmp_path)
