"""Where each policy's resource pool lands on a Ray cluster: its node count and the Ray custom resource that pins it
(`mas.policies.<p>.nnodes`, `node_resource`), checked against the cluster's nodes, and the pools' logical CPUs against
the cluster's, before verl asks Ray for them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import ray
from omegaconf import DictConfig
from verl.plugin.platform import get_platform
from verl.single_controller.ray import ResourcePoolManager
from verl.trainer.ppo.utils import Role

from verl_mas.verl_engine.config import MasConfig, MasConfigError
from verl_mas.verl_engine.policies import policy_pool_name

REWARD_POOL = "reward_pool"


@dataclass
class PolicyPoolManager(ResourcePoolManager):
    """verl's pool manager whose pools named in `node_resources` land only on the nodes that carry that resource.

    verl's `RayResourcePool` adds `{accelerator_type: 1e-4}` to every bundle of the placement groups it makes on
    first use (meant for Ray's `accelerator_type:<GPU model>` resources). A node resource in that slot pins the
    pool's bundles, and so its workers and the vLLM servers verl starts on their nodes, to the nodes given it.
    """

    node_resources: dict[str, str] = field(default_factory=dict)  # pool name -> Ray custom resource

    def create_resource_pool(self) -> None:
        super().create_resource_pool()
        for name, resource in self.node_resources.items():
            self.resource_pool_dict[name].accelerator_type = resource


def policy_pool_manager(config: DictConfig, mas: MasConfig) -> PolicyPoolManager:
    """One pool per policy (`n_gpus_per_node` GPUs on each of its `nnodes` nodes, pinned by its `node_resource`),
    plus verl's reward pool when the reward model has its own; pinned pools are checked against Ray's nodes first.

    Raises:
        MasConfigError: the cluster lacks the nodes a pinned policy needs (`check_nodes`).
    """
    gpus = mas.gpus_per_policy(config.trainer.n_gpus_per_node)
    nodes = mas.nodes_per_policy(config.trainer.nnodes)
    settings = mas.policy_settings()
    spec = {policy_pool_name(p): [n] * nodes[p] for p, n in gpus.items()}
    reward_model = config.reward.reward_model
    if reward_model.enable_resource_pool:
        spec[REWARD_POOL] = [reward_model.n_gpus_per_node] * reward_model.nnodes
    pinned = {policy_pool_name(p): s.node_resource for p, s in settings.items() if s.node_resource is not None}
    if pinned:
        check_nodes(mas, gpus, nodes, ray.nodes(), get_platform().ray_resource_name())
    return PolicyPoolManager(
        resource_pool_spec=spec,
        mapping={Role.RewardModel: REWARD_POOL} if REWARD_POOL in spec else {},
        node_resources=pinned,
    )


def check_nodes(
    mas: MasConfig,
    gpus: Mapping[str, int],
    nodes: Mapping[str, int],
    cluster: Sequence[Mapping[str, Any]],
    device: str = "GPU",
) -> None:
    """The cluster (`ray.nodes()`) can hold every pinned pool: for each node resource, at least the most nodes any
    of its policies spans carry it, alive, each with the GPUs its policies take per node; and no node carries two of
    the run's resources (their policies' GPU shares would then compete for one node). Without this check Ray would
    wait for the placement groups forever.

    Raises:
        MasConfigError: naming the policy's key, the resource and what the cluster has.
    """
    settings = mas.policy_settings()
    resources = {s.node_resource for s in settings.values()}
    alive = [n for n in cluster if n.get("Alive", True)]
    for node in alive:
        carried = sorted(r for r in resources if r in node["Resources"])
        if len(carried) > 1:
            raise MasConfigError(
                f"mas.policies.*.node_resource: node {node['NodeID']} carries {carried}; give each node at most one "
                "of the run's node resources, so that the policies on it are the ones that split its GPUs"
            )
    for resource in sorted(resources):
        policies = [p for p, s in settings.items() if s.node_resource == resource]
        need_gpus = sum(gpus[p] for p in policies)
        carriers = [n for n in alive if resource in n["Resources"]]
        fit = [n for n in carriers if n["Resources"].get(device, 0) >= need_gpus]
        widest = max(policies, key=lambda p: nodes[p])
        if len(fit) < nodes[widest]:
            raise MasConfigError(
                f"mas.policies.{widest}.node_resource={resource}: the policy spans {nodes[widest]} node(s) with "
                f"{need_gpus} {device}(s) each for {policies}, but Ray has {len(carriers)} alive node(s) with "
                f"resource {resource!r}, {len(fit)} of them with {need_gpus} {device}(s); start each node with "
                f"`ray start --resources='{{\"{resource}\": 1}}'` (and its {device}s)"
            )


def check_logical_cpus(
    manager: ResourcePoolManager, transfer_queue: Any, cluster_cpus: float, existing_cluster: bool = False
) -> None:
    """The cluster has at least the logical CPUs the run holds: verl reserves `max_colocate_count` of them per bundle
    (one bundle per GPU of each pool), and TransferQueue's controller and each SimpleStorage unit hold one for the
    whole run. With fewer, verl (or TransferQueue, started first) waits for them forever. Necessary, not sufficient:
    each placement group packs onto one node, which this total over the cluster does not check.

    Args:
        manager: the run's pool manager (`resource_pool_spec`: pool -> GPUs on each of its nodes).
        transfer_queue: the `transfer_queue` config the run starts TransferQueue with.
        cluster_cpus: the cluster's logical CPUs (`ray.cluster_resources()["CPU"]`).
        existing_cluster: the run connects to a running cluster (`ray_init.address`), whose CPUs its nodes set.

    Raises:
        MasConfigError: naming the key to raise (or the nodes' `ray start --num-cpus`) and the count the run needs.
    """
    bundles = sum(sum(gpus) for gpus in manager.resource_pool_spec.values())
    pools = manager.max_colocate_count * bundles
    backend = transfer_queue.backend
    units = backend.SimpleStorage.num_data_storage_units if backend.storage_backend == "SimpleStorage" else 0
    queue = 1 + units  # the controller and each storage unit
    needed = pools + queue
    if needed <= cluster_cpus:
        return
    where = (
        f"start its nodes with more (`ray start --num-cpus=...`, {needed} or more in all)"
        if existing_cluster
        else f"raise ray_kwargs.ray_init.num_cpus to {needed} or more"
    )
    raise MasConfigError(
        f"ray_kwargs.ray_init.num_cpus: Ray has {cluster_cpus:g} logical CPUs and the run needs {needed}: "
        f"{manager.max_colocate_count} per worker slot for {bundles} slot(s) of pools "
        f"{sorted(manager.resource_pool_spec)}, and {queue} for TransferQueue (its controller and {units} storage "
        f"unit(s)); {where} (logical CPUs: Ray schedules by them, the machine's cores may be fewer), or lower "
        f"transfer_queue.backend.SimpleStorage.num_data_storage_units"
    )
