"""Per-policy worker groups on Ray with CPU resources: distinct pools, groups and actor names per policy."""

from __future__ import annotations

import ray
from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool

from verl_fakes import PolicyEchoWorker
from verl_mas.verl_engine.policies import build_policy_worker_groups, policy_pool_name


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
