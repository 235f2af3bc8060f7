"""A Ray cluster of several nodes on this machine (Ray's `cluster_utils`: one raylet per node), each node with its
own custom resource and logical GPUs, for launches that connect to it; and where a launch's policies ran on it."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ray.cluster_utils import Cluster

CLUSTER_FILE = "ray_cluster.json"


@dataclass
class NodeCluster:
    """A running `cluster_utils.Cluster` whose nodes are told apart by their custom resource.

    `node_ids` maps each node's resource to its Ray node id. The cluster keeps its session files (and the address
    file that `ray.init()` without an address would follow) in its own temp folder, so that no other Ray user of
    this machine connects to it by accident.
    """

    cluster: Cluster
    node_ids: dict[str, str]
    temp_dir: str

    @property
    def address(self) -> str:
        return self.cluster.address

    def overrides(self) -> list[str]:
        """`python -m verl_mas.main +platform=cpu` overrides that connect the launch to this cluster instead of
        starting Ray (a driver joining a cluster may not declare CPUs or GPUs)."""
        return [
            f"+ray_kwargs.ray_init.address={self.address}",
            "ray_kwargs.ray_init.num_cpus=null",
            "ray_kwargs.ray_init.num_gpus=null",
        ]

    def actor_nodes(self, name_prefix: str) -> dict[str, list[str]]:
        """Node ids of every actor (alive or ended) whose Ray name starts with `name_prefix`, per name, from the
        GCS's actor table (an actor restarted or named again in a later launch lists each node it ran on)."""
        found: dict[str, list[str]] = {}
        for actor in self.cluster.global_state.actor_table(None).values():
            name = actor.get("Name") or ""
            if name.startswith(name_prefix):
                found.setdefault(name, []).append(actor["Address"]["NodeID"])
        return found

    def stop(self) -> None:
        self.cluster.shutdown()
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def start_node_cluster(folder: Path, resources: Sequence[str], gpus: int = 1, cpus: int = 8) -> NodeCluster:
    """Start one node per resource (the first is the head), each with `gpus` logical GPUs and `cpus` logical CPUs
    (Ray schedules by them; the machine's cores are shared), and write the address and node ids to
    `folder`/ray_cluster.json."""
    temp_dir = tempfile.mkdtemp(prefix="rn", dir="/tmp")  # short: Ray's socket paths live under it
    previous = os.environ.get("RAY_TMPDIR")
    os.environ["RAY_TMPDIR"] = temp_dir  # where the nodes, and the address file, go
    try:
        cluster = Cluster()
        for resource in resources:
            cluster.add_node(
                num_cpus=cpus,
                num_gpus=gpus,
                resources={resource: 1},
                include_dashboard=False,
                object_store_memory=200 * 1024**2,
            )
    finally:
        if previous is None:
            os.environ.pop("RAY_TMPDIR")
        else:
            os.environ["RAY_TMPDIR"] = previous
    node_ids = {}
    for node in cluster.global_state.node_table():
        carried = [r for r in resources if r in node["Resources"]]
        if node["Alive"] and carried:
            node_ids[carried[0]] = node["NodeID"]
    started = NodeCluster(cluster, node_ids, temp_dir)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / CLUSTER_FILE).write_text(json.dumps({"address": started.address, "node_ids": node_ids}, indent=1))
    return started


def check_policies_on_nodes(cluster: NodeCluster, pinned: Mapping[str, str]) -> dict[str, dict[str, list[str]]]:
    """Every actor of each policy (its actor workers `mas_<policy>_WorkerDict_*`, its LLM servers
    `mas_<policy>_vllm_server_*`) ran on the node carrying the policy's resource, and each policy had both.

    Args:
        pinned: policy -> the node resource its `mas.policies.<p>.node_resource` names.

    Returns:
        policy -> actor name -> the node ids it ran on, for the report.
    """
    ran: dict[str, dict[str, list[str]]] = {}
    for policy, resource in pinned.items():
        actors = cluster.actor_nodes(f"mas_{policy}_")
        workers = [name for name in actors if "WorkerDict" in name]
        servers = [name for name in actors if "_server_" in name]
        assert workers and servers, f"policy {policy}: workers {workers}, servers {servers} in Ray's actor table"
        wrong = {name: nodes for name, nodes in actors.items() if set(nodes) != {cluster.node_ids[resource]}}
        assert not wrong, f"policy {policy} pinned to {resource} ({cluster.node_ids[resource]}) ran elsewhere: {wrong}"
        ran[policy] = actors
    return ran
