"""Per-policy worker groups on Ray with CPU resources: distinct pools, groups and actor names per policy."""

from __future__ import annotations

import ray
from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool

from verl_fakes import PolicyEchoWorker
from verl_mas.verl_engine.policies import build_policy_worker_groups, policy_job_id, policy_pool_name


def test_two_policies_get_distinct_groups_and_names(ray_session):
    policies = ("coder", "tester")
    pools = {
        p: RayResourcePool([1], use_gpu=False, name_prefix=policy_pool_name(p), max_colocate_count=1) for p in policies
    }

    def worker_class_of(policy):
        return "actor_rollout", RayClassWithInitArgs(cls=ray.remote(PolicyEchoWorker), policy=policy)

    groups = build_policy_worker_groups(pools, worker_class_of, device_name="cpu")

    assert list(groups) == list(policies)
    assert groups["coder"] is not groups["tester"]
    for policy, group in groups.items():
        assert group.world_size == 1
        assert all(name.startswith(f"mas_{policy}_") for name in group.worker_names)
        assert group.whoami() == [(policy, f"mas_{policy}_", 0)]  # the spawned group serves this policy only
    names = [name for group in groups.values() for name in group.worker_names]
    assert len(set(names)) == len(names)
    for name in names:
        ray.get_actor(name)  # every name resolves to a live actor (raises ValueError otherwise)
    assert pools["coder"].pgs[0].id != pools["tester"].pgs[0].id  # one placement group per policy pool


def test_weight_sync_sockets_differ_by_policy_and_by_launch_and_agree_within_one():
    # every fresh Ray cluster's first job is 01000000: two launches on one machine differ only in their node's id
    one, other = "3f2a9c1e" + "0" * 48, "77b0d4aa" + "0" * 48
    paths = {policy_job_id("01000000", policy, node) for policy in ("tool", "plan") for node in (one, other)}
    assert len(paths) == 4
    assert policy_job_id("01000000", "tool", one) == "01000000-3f2a9c1e-mas_tool"  # the server's and the worker's
