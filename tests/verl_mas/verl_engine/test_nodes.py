"""Policies placed on nodes: `mas.policies.<p>.nnodes` and `node_resource` (checked at start, naming the key), the
cluster check of `placement`, the shared-folder rule of `shared_folders`; and, marked slow (`-m slow`), `per_role`
on a Ray cluster of two nodes started on this machine, each policy pinned to its own node, killed after step 1's
checkpoints and resumed for step 2.

The slow tests reuse `test_cpu_stack`'s model, data and launch (`stack`, `launch`), adding only the cluster's
overrides and the placement keys. Run them with
`.venv/bin/python -m pytest -p no:xdist -q -m slow tests/verl_mas/verl_engine/test_nodes.py` (several minutes).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import MappingProxyType

import pytest
import ray
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf
from ray_cluster import CLUSTER_FILE, NodeCluster, check_policies_on_nodes, start_node_cluster

from verl_mas.main import CONFIG_DIR
from verl_mas.verl_engine.config import MasConfig, MasConfigError, check_supported, mas_config_of
from verl_mas.verl_engine.hooks import TrainerHook, load_trainer_hooks
from verl_mas.verl_engine.hooks.phase_check import PhaseCheck
from verl_mas.verl_engine.hooks.update_record import UpdateRecorder
from verl_mas.verl_engine.placement import PolicyPoolManager, check_logical_cpus, check_nodes, policy_pool_manager
from verl_mas.verl_engine.shared_folders import SharedFolder, check_shared_folders, shared_folders, unseen_folders
from verl_mas_envs.code.problems import CACHE_VARIABLE
from verl_mas_envs.puzzles.plan_path import PlanPathEnv

RESOURCES = {"tool": "mas_tool", "plan": "mas_plan"}  # policy -> the node resource it is pinned to


def mas(policies=None, router="per_role", **overrides) -> MasConfig:
    return MasConfig.from_mapping({"env": "plan_path", "router": router, "policies": policies or {}, **overrides})


def pinned(nnodes: int | None = 1, **extra) -> dict:
    return {p: {"node_resource": r, "nnodes": nnodes, **extra.get(p, {})} for p, r in RESOURCES.items()}


# ------------------------------------------------------------------ the keys


@pytest.mark.parametrize(
    "policies, message",
    [
        ({"tool": {"nnodes": 0}}, r"^mas\.policies\.tool\.nnodes must be an integer >= 1 or null, got 0"),
        ({"tool": {"nnodes": 1.5}}, r"^mas\.policies\.tool\.nnodes must be an integer >= 1 or null, got 1\.5"),
        ({"tool": {"nnodes": True}}, r"^mas\.policies\.tool\.nnodes must be an integer >= 1 or null, got True"),
        (pinned(plan={"node_resource": "GPU"}), r"^mas\.policies\.plan\.node_resource must be a Ray custom resource"),
        (pinned(plan={"node_resource": ""}), r"^mas\.policies\.plan\.node_resource must be a Ray custom resource"),
        (pinned(plan={"node_resource": 3}), r"^mas\.policies\.plan\.node_resource must be a Ray custom resource"),
        ({"tool": {"node_resource": "a"}}, r"^mas\.policies\.plan\.node_resource: set it for every policy or for none"),
    ],
)
def test_bad_placement_keys_are_refused_naming_the_key(policies, message):
    with pytest.raises(MasConfigError, match=message):
        mas(policies)


@pytest.mark.parametrize(
    "policies, n_gpus, expected",
    [
        ({}, 8, {"tool": 4, "plan": 4}),  # one node group: split as before
        (pinned(), 8, {"tool": 8, "plan": 8}),  # each policy on its own nodes: the whole node each
        (pinned(tool={"n_gpus_per_node": 8}), 8, {"tool": 8, "plan": 8}),
        ({p: {"node_resource": "shared_nodes"} for p in RESOURCES}, 8, {"tool": 4, "plan": 4}),  # one resource
    ],
)
def test_gpus_are_split_among_the_policies_that_share_nodes(policies, n_gpus, expected):
    assert mas(policies).gpus_per_policy(n_gpus) == expected


def test_a_policy_alone_on_its_nodes_takes_them_whole():
    with pytest.raises(MasConfigError, match=r"\{'tool': 2\} must add up to trainer\.n_gpus_per_node=8"):
        mas(pinned(tool={"n_gpus_per_node": 2})).gpus_per_policy(8)


def test_nodes_per_policy_by_hand():
    assert mas().nodes_per_policy(3) == {"tool": 3, "plan": 3}
    assert mas({"tool": {"nnodes": 1}}).nodes_per_policy(3) == {"tool": 1, "plan": 3}
    assert mas(pinned(tool={"nnodes": 2})).nodes_per_policy(3) == {"tool": 2, "plan": 1}
    same = {p: {"node_resource": "nodes", "nnodes": n} for p, n in (("tool", 2), ("plan", 3))}
    assert mas(same).nodes_per_policy(3) == {"tool": 2, "plan": 3}  # one resource: they share 3 nodes


@pytest.mark.parametrize(
    "policies, trainer_nnodes, message",
    [
        ({"tool": {"nnodes": 3}}, 2, r"^mas\.policies\.tool\.nnodes=3 is more than trainer\.nnodes=2"),
        (pinned(), 1, r"^mas\.policies\.\*\.nnodes: .*\{'mas_tool': 1, 'mas_plan': 1\} nodes, 2 in all, more than "),
        (pinned(None), 2, r"^mas\.policies\.\*\.nnodes: .*\{'mas_tool': 2, 'mas_plan': 2\} nodes, 4 in all"),
    ],
)
def test_more_nodes_than_the_trainer_has_are_refused(policies, trainer_nnodes, message):
    with pytest.raises(MasConfigError, match=message):
        mas(policies).nodes_per_policy(trainer_nnodes)


def composed(overrides: list[str]):
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        return compose("mas_trainer", overrides=["mas.env=plan_path", *overrides])


@pytest.mark.parametrize("key, value", [("nnodes", 1), ("node_resource", "mas_tool")])
def test_one_policy_refuses_the_placement_keys(key, value):
    config = composed([f"+mas.policies.shared.{key}={value}"])
    with pytest.raises(MasConfigError, match=rf"^mas\.policies\.shared\.{key}: only with several policies"):
        check_supported(config, mas({"shared": {key: value}}, router="shared"))


def test_the_start_checks_refuse_more_nodes_than_the_trainer_has():
    overrides = ["mas.router=per_role", *(f"+mas.policies.{p}.node_resource={r}" for p, r in RESOURCES.items())]
    config = composed([*overrides, "trainer.nnodes=1"])
    with pytest.raises(MasConfigError, match=r"2 in all, more than trainer\.nnodes=1"):
        check_supported(config, mas(pinned()))
    check_supported(composed([*overrides, "trainer.nnodes=2"]), mas(pinned()))


# ------------------------------------------------------------------ the cluster check


def node(node_id: str, gpus: float, *resources: str, alive: bool = True) -> dict:
    return {"NodeID": node_id, "Alive": alive, "Resources": {"CPU": 8.0, "GPU": gpus, **dict.fromkeys(resources, 1.0)}}


def test_pinned_pools_fit_the_nodes_that_carry_their_resources():
    config = mas(pinned(tool={"nnodes": 2}))
    nodes = {"tool": 2, "plan": 1}
    cluster = [node("a1", 8, "mas_tool"), node("a2", 8, "mas_tool"), node("b", 8, "mas_plan"), node("head", 0)]
    check_nodes(config, {"tool": 8, "plan": 8}, nodes, cluster)
    with pytest.raises(MasConfigError, match=r"^mas\.policies\.tool\.node_resource=mas_tool: the policy spans 2 node"):
        check_nodes(config, {"tool": 8, "plan": 8}, nodes, [*cluster[::2], node("a2", 8, "mas_tool", alive=False)])
    small = [node("a1", 8, "mas_tool"), node("a2", 4, "mas_tool"), cluster[2]]
    with pytest.raises(MasConfigError, match=r"2 alive node\(s\) with resource 'mas_tool', 1 of them with 8 GPU"):
        check_nodes(config, {"tool": 8, "plan": 8}, nodes, small)
    with pytest.raises(MasConfigError, match=r"^mas\.policies\.\*\.node_resource: node b carries \['mas_plan', 'mas"):
        check_nodes(config, {"tool": 8, "plan": 8}, nodes, [*cluster[:2], node("b", 8, "mas_plan", "mas_tool")])


def test_policies_sharing_a_resource_need_their_gpus_together_on_each_node():
    config = mas({p: {"node_resource": "nodes"} for p in RESOURCES})
    check_nodes(config, {"tool": 4, "plan": 4}, {"tool": 1, "plan": 1}, [node("n", 8, "nodes")])
    with pytest.raises(MasConfigError, match=r"1 alive node\(s\) with resource 'nodes', 0 of them with 8 GPU"):
        check_nodes(config, {"tool": 4, "plan": 4}, {"tool": 1, "plan": 1}, [node("n", 6, "nodes")])


def test_the_pool_manager_asks_each_pinned_policy_for_its_nodes(monkeypatch):
    config = composed(["mas.router=per_role", "trainer.nnodes=2", "trainer.n_gpus_per_node=4"])
    seen = []

    def nodes() -> list[dict]:
        seen.append("asked")
        return [node("a", 4, "mas_tool"), node("b", 4, "mas_plan")]

    monkeypatch.setattr(ray, "nodes", nodes)
    manager = policy_pool_manager(config, mas(pinned()))
    assert isinstance(manager, PolicyPoolManager)
    assert manager.resource_pool_spec == {"mas_tool_pool": [4], "mas_plan_pool": [4]}
    assert manager.node_resources == {"mas_tool_pool": "mas_tool", "mas_plan_pool": "mas_plan"}
    assert seen == ["asked"]
    unpinned = policy_pool_manager(config, mas())
    assert unpinned.resource_pool_spec == {"mas_tool_pool": [2, 2], "mas_plan_pool": [2, 2]}  # as verl's spec
    assert unpinned.node_resources == {} and seen == ["asked"]  # Ray's nodes are not read


# ------------------------------------------------------------------ shared folders


def trainer_config(**trainer) -> DictConfig:
    node = {"save_freq": 1, "resume_mode": "auto", "default_local_dir": "/shared/ckpt", **trainer}
    return OmegaConf.create({"trainer": node, "trainer_hooks": {}})


def qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


class Wanders(TrainerHook):
    """A user's hook that declares none of the paths it writes: nothing of it is checked."""

    def __init__(self, path: str):
        self.path = path


class Caching(PlanPathEnv):
    """An environment that is no built-in one and shares a folder through a variable of its own."""

    shared_folder_variables = MappingProxyType({"MY_ENV_CACHE": "its tables"})


def test_the_run_s_folders_are_its_checkpoints_timeline_and_hook_files():
    config = trainer_config()
    config.trainer_hooks = {
        "audit": {"_target_": qualified(UpdateRecorder), "audit": "/shared/run/audit.jsonl", "capture": "/r/cap"},
        "check": {"_target_": qualified(PhaseCheck), "folder": "/shared/run/check"},
        "own": {"_target_": qualified(Wanders), "path": "relative/is/not/ours"},
    }
    found = shared_folders(config, mas(timeline="/shared/run/timeline.jsonl"), load_trainer_hooks(config), environ={})
    assert found == [
        SharedFolder("trainer.default_local_dir", "/shared/ckpt"),
        SharedFolder("mas.timeline", "/shared/run"),
        SharedFolder("trainer_hooks.audit.audit", "/shared/run"),
        SharedFolder("trainer_hooks.audit.capture", "/r/cap"),
        SharedFolder("trainer_hooks.check.folder", "/shared/run/check"),
    ]
    assert shared_folders(trainer_config(save_freq=-1, resume_mode="disable"), mas(), {}, environ={}) == []


def test_a_relative_hook_path_is_refused_naming_the_hook_s_option():
    config = trainer_config()
    config.trainer_hooks = {"audit": {"_target_": qualified(UpdateRecorder), "audit": "/r/a.jsonl", "capture": "cap"}}
    with pytest.raises(MasConfigError, match=r"^trainer_hooks\.audit\.capture=cap: a relative path on a Ray cluster"):
        shared_folders(config, mas(), load_trainer_hooks(config), environ={})


@pytest.mark.parametrize(
    "config, timeline, key",
    [
        (trainer_config(default_local_dir="checkpoints/run"), None, "trainer.default_local_dir=checkpoints/run"),
        (trainer_config(), "timeline.jsonl", "mas.timeline=timeline.jsonl"),
    ],
)
def test_a_relative_path_is_refused_naming_its_key(config, timeline, key):
    with pytest.raises(MasConfigError, match=rf"^{key}: a relative path on a Ray cluster of several nodes"):
        shared_folders(config, mas(timeline=timeline), {}, environ={})


@pytest.mark.parametrize(
    "env, variable",
    [
        ("code", CACHE_VARIABLE),  # the code environment's case cache, by the environment's name
        ("verl_mas_envs.code.env:CodeEnv", CACHE_VARIABLE),  # or by its import path
        (f"{__name__}:Caching", "MY_ENV_CACHE"),  # an environment of the user's own
    ],
)
def test_a_folder_the_environment_declares_must_be_one_absolute_folder(env, variable):
    declared = MasConfig.from_mapping({"env": env})
    for environ in ({}, {variable: "cache"}, {"OTHER": "/shared/cache"}):
        with pytest.raises(MasConfigError, match=rf"^{variable}=.*\+ray_kwargs\.ray_init\.runtime_env\.env_vars"):
            shared_folders(trainer_config(), declared, {}, environ=environ)
    found = shared_folders(trainer_config(), declared, {}, environ={variable: "/shared/cache"})
    assert found[-1] == SharedFolder(variable, "/shared/cache", variable)
    assert SharedFolder(variable, "/shared/cache", variable) not in shared_folders(trainer_config(), mas(), {}, {})


def test_a_node_lists_the_folders_it_does_not_see(tmp_path, monkeypatch):
    seen, unseen = tmp_path / "seen", tmp_path / "unseen"
    for folder in (seen, unseen):
        folder.mkdir()
    (seen / "token").write_text("")
    monkeypatch.setenv("CACHE_VARIABLE", str(seen))
    folders = [
        SharedFolder("a", str(seen)),
        SharedFolder("b", str(unseen)),
        SharedFolder("c", str(seen), "CACHE_VARIABLE"),
        SharedFolder("d", str(seen), "OTHER_VARIABLE_NOT_SET"),
    ]
    assert unseen_folders(folders, "token") == [
        f"b={unseen} (not the folder the trainer's node wrote to)",
        f"d={seen} (here OTHER_VARIABLE_NOT_SET=None)",
    ]


# ------------------------------------------------------------------ on a Ray cluster of two nodes (slow)


def _cpu_stack_module():
    """`test_cpu_stack` loaded by path (the test folder is no package): its `stack` fixture and `launch`."""
    path = Path(__file__).with_name("test_cpu_stack.py")
    spec = importlib.util.spec_from_file_location("cpu_stack_for_nodes", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


cpu_stack = _cpu_stack_module()
stack = cpu_stack.stack  # the module-scoped fixture: a warm-started tiny model and plan_path data


@pytest.fixture(scope="module")
def two_nodes(stack):
    """Two Ray nodes, one logical GPU each, told apart by the resources `mas_tool` and `mas_plan`."""
    cluster = start_node_cluster(stack / "nodes", list(RESOURCES.values()))
    yield cluster
    cluster.stop()


@pytest.mark.slow
def test_pools_and_folder_checks_on_two_real_nodes(two_nodes: NodeCluster, stack):
    assert len(set(two_nodes.node_ids.values())) == 2
    assert json.loads((stack / "nodes" / CLUSTER_FILE).read_text())["node_ids"] == two_nodes.node_ids
    config = composed(["mas.router=per_role", "trainer.nnodes=2", "trainer.n_gpus_per_node=1"])
    ray.init(address=two_nodes.address)
    try:
        manager = policy_pool_manager(config, mas(pinned()))
        manager.create_resource_pool()
        for policy, resource in RESOURCES.items():
            groups = manager.resource_pool_dict[f"mas_{policy}_pool"].get_placement_groups()
            table = ray.util.placement_group_table(groups[0])
            assert set(table["bundles_to_node_id"].values()) == {two_nodes.node_ids[resource]}, policy
            assert table["bundles"][0][resource] == pytest.approx(1e-4)
        with pytest.raises(MasConfigError, match=r"0 alive node\(s\) with resource 'nowhere_plan'"):
            policy_pool_manager(config, mas({p: {"node_resource": f"nowhere_{p}", "nnodes": 1} for p in RESOURCES}))
        folders = composed([f"trainer.default_local_dir={stack / 'nodes' / 'ckpt'}"])
        assert check_shared_folders(folders, mas(timeline=str(stack / "nodes" / "timeline.jsonl")), {}) == 2
        assert not [p for p in (stack / "nodes").rglob(".verl_mas_shared_*")]  # the tokens are removed
        with pytest.raises(MasConfigError, match=r"^mas\.timeline=timeline\.jsonl: a relative path"):
            check_shared_folders(folders, mas(timeline="timeline.jsonl"), {})
    finally:
        ray.shutdown()


@pytest.mark.slow
def test_per_role_pinned_to_two_nodes_trains_and_resumes(two_nodes: NodeCluster, stack):
    checkpoints = stack / "checkpoints" / "nodes"
    placed = [
        "mas.router=per_role",
        "trainer.nnodes=2",
        "trainer.n_gpus_per_node=1",
        *(f"+mas.policies.{p}.node_resource={r}" for p, r in RESOURCES.items()),
        *(f"+mas.policies.{p}.nnodes=1" for p in RESOURCES),
        *two_nodes.overrides(),
    ]
    step_one_saved = cpu_stack.step_saved([checkpoints / policy for policy in RESOURCES], 1)
    timeline = [f"+mas.timeline={stack / name / 'timeline.jsonl'}" for name in ("nodes-killed", "nodes-resumed")]
    killed = cpu_stack.launch(stack, "nodes-killed", [*placed, timeline[0]], kill_when=step_one_saved)
    assert killed.returncode is None  # killed, not ended
    assert sorted((r["step"], r["policy"]) for r in killed.audit() if r["step"] == 1) == [(1, "plan"), (1, "tool")]
    first = check_policies_on_nodes(two_nodes, RESOURCES)
    resumed = cpu_stack.launch(stack, "nodes-resumed", [*placed, timeline[1]])
    assert sorted((r["step"], r["policy"]) for r in resumed.audit()) == [(2, "plan"), (2, "tool")]  # 1 not redone
    second = check_policies_on_nodes(two_nodes, RESOURCES)
    for run in (killed, resumed):
        assert "shared folder(s) seen from all 2 Ray nodes" in run.log()
    start = cpu_stack.initial_weights(stack)
    for policy in RESOURCES:
        one, two = (cpu_stack.actor_weights(checkpoints / policy / f"global_step_{s}") for s in (1, 2))
        assert cpu_stack.max_change(start, one) > 0 and cpu_stack.max_change(one, two) > 0, policy
        assert all(len(nodes) == 2 for nodes in second[policy].values())  # each actor name: once per launch
        assert len(first[policy]) == len(second[policy])
    print(
        f"two nodes {two_nodes.node_ids}; killed launch {killed.wall_s:.0f} s, resumed {resumed.wall_s:.0f} s; "
        f"actors {json.dumps(second)}"
    )


def transfer_queue(backend: str = "SimpleStorage", units: int = 1) -> DictConfig:
    storage = {"SimpleStorage": {"num_data_storage_units": units}}
    return OmegaConf.create({"backend": {"storage_backend": backend, **storage}})


@pytest.mark.parametrize(
    ("spec", "queue", "needed"),
    [
        ({"mas_a_pool": [1], "mas_b_pool": [1], "mas_c_pool": [1]}, transfer_queue(), 3 * 3 + 1 + 1),
        ({"mas_a_pool": [2, 2], "reward_pool": [1]}, transfer_queue(units=8), 3 * 5 + 1 + 8),
        ({"mas_a_pool": [4]}, transfer_queue("MooncakeStore", units=8), 3 * 4 + 1),  # no storage units of its own
    ],
)
def test_the_logical_cpus_a_run_needs_are_its_bundles_and_transfer_queue_s(spec, queue, needed):
    manager = PolicyPoolManager(resource_pool_spec=spec, mapping={})
    check_logical_cpus(manager, queue, cluster_cpus=needed)  # exactly enough
    message = rf"^ray_kwargs\.ray_init\.num_cpus: Ray has {needed - 1} .* needs {needed}"
    with pytest.raises(MasConfigError, match=message):
        check_logical_cpus(manager, queue, cluster_cpus=needed - 1)


def cpu_profile(overrides: list[str]) -> DictConfig:
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        return compose("mas_trainer", overrides=["mas.env=plan_path", "+platform=cpu", *overrides])


def test_the_cpu_profile_holds_two_policies_and_names_the_key_for_a_third_slot():
    # two policies (per_role on Plan-Path) fill the profile's logical CPUs exactly: 3 a slot and 2 for TransferQueue
    config = cpu_profile(["mas.router=per_role", "trainer.n_gpus_per_node=2", "ray_kwargs.ray_init.num_gpus=2"])
    manager = policy_pool_manager(config, mas_config_of(config))
    cpus = config.ray_kwargs.ray_init.num_cpus
    check_logical_cpus(manager, config.transfer_queue, cpus)
    config = cpu_profile(["trainer.n_gpus_per_node=3", "ray_kwargs.ray_init.num_gpus=3"])  # one policy, 3 slots
    manager = policy_pool_manager(config, mas_config_of(config))
    message = rf"Ray has {cpus} logical CPUs and the run needs 11: .* raise ray_kwargs\.ray_init\.num_cpus to 11 or"
    with pytest.raises(MasConfigError, match=message):
        check_logical_cpus(manager, config.transfer_queue, cpus)
    # on a cluster the run connects to, its nodes set the CPUs (Ray refuses num_cpus there)
    with pytest.raises(MasConfigError, match=r"needs 11: .* start its nodes with more \(`ray start --num-cpus=\.\.\.`"):
        check_logical_cpus(manager, config.transfer_queue, cpus, existing_cluster=True)
