"""The folders a run on a Ray cluster of several nodes must share between them (checkpoints, `mas.timeline`, the
paths the trainer hooks declare, the folders the environment declares), and the start-time check that every node
sees them.

Checkpoints are written by each policy's workers on their own nodes and found again by the trainer, wherever Ray
placed it; the timeline is appended to by the trainer, the actor workers and the agent-loop workers; the hooks'
files are written on the trainer's node, which Ray picks; an environment's shared folder (a cache) is read and
filled by every reward worker. A node that does not see one of these folders would split the run's record, or
resume from nothing.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import ray
from omegaconf import DictConfig
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from verl_mas.env import get_env_class
from verl_mas.verl_engine.config import MasConfig, MasConfigError
from verl_mas.verl_engine.hooks import HOOKS_KEY, TrainerHook

TOKEN_PREFIX = ".verl_mas_shared_"


@dataclass(frozen=True)
class SharedFolder:
    """A folder every node must see: the config key that names it, its absolute path and, for a folder each process
    reads from an environment variable, that variable (every node's processes must see the same value)."""

    key: str
    folder: str
    variable: str | None = None


def shared_folders(
    config: DictConfig, mas: MasConfig, hooks: Mapping[str, TrainerHook], environ: Mapping[str, str]
) -> list[SharedFolder]:
    """The folders this run writes that must be shared when it spans several nodes.

    Args:
        hooks: the run's trainer hooks by name (`load_trainer_hooks`), each declaring the paths it writes.
        environ: the trainer's environment (`os.environ`), for the folders the environment names by a variable
            (`MultiAgentEnv.shared_folder_variables`).

    Raises:
        MasConfigError: a relative path (it resolves against each process's working directory, which differs from
            node to node), or an environment's shared folder that is not set to one absolute folder for the job.
    """
    named: list[tuple[str, str | None, bool]] = []  # (key, path, is a file)
    if config.trainer.save_freq > 0 or config.trainer.resume_mode != "disable":
        named.append(("trainer.default_local_dir", config.trainer.default_local_dir, False))
    named.append(("mas.timeline", mas.timeline, True))
    for name, hook in hooks.items():
        for written in hook.written_paths():
            named.append((f"{HOOKS_KEY}.{name}.{written.option}", written.path, written.is_file))
    folders = []
    for key, path, is_file in named:
        if path is None:
            continue
        path = os.path.expanduser(str(path))
        if not os.path.isabs(path):
            raise MasConfigError(
                f"{key}={path}: a relative path on a Ray cluster of several nodes; each node's processes would resolve "
                "it against their own working directory: give an absolute path on storage every node mounts"
            )
        folders.append(SharedFolder(key, os.path.dirname(path) if is_file else path))
    for variable, holds in get_env_class(mas.env).shared_folder_variables.items():
        folder = environ.get(variable)
        if not folder or not os.path.isabs(folder):
            raise MasConfigError(
                f"{variable}={folder or '(unset)'}: environment {mas.env!r} shares a folder through it ({holds}); on "
                f"a cluster of several nodes it must be one absolute folder every node mounts: set "
                f"+ray_kwargs.ray_init.runtime_env.env_vars.{variable}=<shared folder>"
            )
        folders.append(SharedFolder(variable, folder, variable))
    return folders


def unseen_folders(folders: Sequence[SharedFolder], token: str) -> list[str]:
    """On this node: the folders that lack the `token` file the trainer's node wrote, or whose variable this node's
    processes read with another value; each as 'key=folder' and why."""
    unseen = []
    for shared in folders:
        if shared.variable is not None and os.environ.get(shared.variable) != shared.folder:
            unseen.append(f"{shared.key}={shared.folder} (here {shared.variable}={os.environ.get(shared.variable)})")
        elif not (Path(shared.folder) / token).is_file():
            unseen.append(f"{shared.key}={shared.folder} (not the folder the trainer's node wrote to)")
    return unseen


_unseen_on_node = ray.remote(num_cpus=0)(unseen_folders)


def check_shared_folders(config: DictConfig, mas: MasConfig, hooks: Mapping[str, TrainerHook]) -> int:
    """On a Ray cluster of several alive nodes, check that each of the run's `shared_folders` is one folder for all:
    a token file written here must be seen from every node. Returns the number of nodes (1: nothing to check).

    Raises:
        MasConfigError: a folder `shared_folders` refuses, or, per node that does not see them, the keys and folders.
    """
    nodes = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
    if len(nodes) < 2:
        return len(nodes)
    folders = shared_folders(config, mas, hooks, os.environ)
    token = f"{TOKEN_PREFIX}{uuid.uuid4().hex}"
    written = []
    try:
        for shared in folders:
            path = Path(shared.folder) / token
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("")
            written.append(path)
        checks = [
            _unseen_on_node.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node, soft=False)
            ).remote(folders, token)
            for node in nodes
        ]
        unseen = dict(zip(nodes, ray.get(checks), strict=True))
    finally:
        for path in written:
            path.unlink(missing_ok=True)
    missing = {node: found for node, found in unseen.items() if found}
    if missing:
        lines = "; ".join(f"node {node}: {', '.join(found)}" for node, found in missing.items())
        raise MasConfigError(
            f"the run spans {len(nodes)} Ray nodes, but not all of them see its folders: {lines}. Put them on "
            "storage every node mounts at the same path (docs/nodes.md)"
        )
    print(f"verl_mas: {len(folders)} shared folder(s) seen from all {len(nodes)} Ray nodes: {[f.key for f in folders]}")
    return len(nodes)
