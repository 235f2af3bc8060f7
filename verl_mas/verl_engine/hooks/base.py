"""Trainer hooks: `AtGrpoTrainer`'s public extension point, named by import path under the top-level
`trainer_hooks:` config key and built in the trainer's own (Ray) process; what a hook may use of the trainer, and
the paths a hook declares it writes."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from omegaconf import OmegaConf

from verl_mas.verl_engine.config import MasConfigError

if TYPE_CHECKING:
    from transfer_queue import KVBatchMeta

    from verl_mas.verl_engine.phases import SplitWorkerGroup

HOOKS_KEY = "trainer_hooks"
TARGET_KEY = "_target_"
EVENTS: tuple[str, ...] = ("before_log_probs", "after_log_probs", "before_update", "after_update")


class HookedTrainer(Protocol):
    """What a hook may use of the trainer (`AtGrpoTrainer` is one): the step, the policies, and the trainer's public
    phases, which run on every policy at once (`sequential`: one policy after the other)."""

    global_steps: int
    policies: Mapping[str, Any]  # policy id -> its runtime

    def run_phase(
        self,
        phase: str,
        run: Callable[[str, SplitWorkerGroup | None], object],
        *,
        step: int | None,
        metrics: dict | None = None,
        sequential: bool = False,
        policies: list[str] | None = None,
    ) -> dict: ...

    def compute_old_log_probs(
        self, parts: dict[str, KVBatchMeta], metrics: dict, *, sequential: bool = False
    ) -> dict[str, KVBatchMeta]: ...

    def update_actors(self, parts: dict[str, KVBatchMeta], metrics: dict, *, sequential: bool = False) -> None: ...


@dataclass(frozen=True)
class WrittenPath:
    """A path a hook writes to: the constructor option that names it, the path as given, and whether it is a file
    (then its folder is what the hook writes in) or a folder."""

    option: str
    path: str
    is_file: bool


class TrainerHook:
    """Base class of a trainer hook: override the events you need; the others do nothing.

    Each event gets the trainer and `parts`, each policy's rows of this step (policy id -> `KVBatchMeta` in
    TransferQueue, router order). The events of one training step, in order:

    - `before_log_probs`: the rows balanced, before the old log-probs;
    - `after_log_probs`: with the old log-probs, before the reference log-probs;
    - `before_update`: with the advantages, before the actor updates (steps that update only);
    - `after_update`: after the actor updates.

    A hook may read the rows (`transfer_queue.kv_batch_get`) and run work of its own on every policy through the
    trainer's public `run_phase`, `compute_old_log_probs` and `update_actors`; it must leave the rows and the actors
    as it found them. A hook that writes files declares where (`written_paths`).

    (The local engine's extension point is `verl_mas.local.callbacks.RunCallbacks`: it observes rollouts, advantages
    and metric rows of one process, where a trainer hook works on verl's per-policy phases and TransferQueue rows.)
    """

    def before_log_probs(self, trainer: HookedTrainer, parts: dict[str, KVBatchMeta]) -> None:
        """The step's rows, balanced, before the old log-probs."""

    def after_log_probs(self, trainer: HookedTrainer, parts: dict[str, KVBatchMeta]) -> None:
        """The rows with their old log-probs."""

    def before_update(self, trainer: HookedTrainer, parts: dict[str, KVBatchMeta]) -> None:
        """The rows with their advantages, as each policy's update will fetch them."""

    def after_update(self, trainer: HookedTrainer, parts: dict[str, KVBatchMeta]) -> None:
        """The actors updated, before the weight sync."""

    def written_paths(self) -> list[WrittenPath]:
        """Where this hook writes, as its options gave it. The hook writes on the trainer's node, which Ray picks: on
        a cluster of several nodes the trainer checks at start that every node sees these paths."""
        return []


def load_trainer_hooks(config: Any) -> dict[str, TrainerHook]:
    """The hooks `config.trainer_hooks` names (name -> hook, built in its order): each entry
    `{_target_: module.Class, **options}`, `Class` a `TrainerHook` subclass and `options` its constructor's keyword
    arguments. None or absent: no hooks.

    Raises:
        MasConfigError: naming the entry (and `_target_` where it is the import path that is wrong).
    """
    node = config.get(HOOKS_KEY)
    if node is None:
        return {}
    entries = OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node
    if not isinstance(entries, Mapping):
        raise MasConfigError(f"{HOOKS_KEY} must be a mapping of name -> {{{TARGET_KEY}: module.Class, ...}}")
    return {str(name): _built_hook(f"{HOOKS_KEY}.{name}", entry) for name, entry in entries.items()}


def _built_hook(key: str, entry: Any) -> TrainerHook:
    if not isinstance(entry, Mapping) or not isinstance(entry.get(TARGET_KEY), str):
        raise MasConfigError(f"{key} must be a mapping with {TARGET_KEY}: the import path of a TrainerHook class")
    options = {str(name): value for name, value in entry.items() if name != TARGET_KEY}
    hook_class = _imported(f"{key}.{TARGET_KEY}", entry[TARGET_KEY])
    try:
        return hook_class(**options)
    except (TypeError, ValueError) as exc:
        raise MasConfigError(f"{key}: {hook_class.__name__}({options}) failed: {exc}") from None


def _imported(key: str, path: str) -> type[TrainerHook]:
    module_name, _, name = path.rpartition(".")
    try:
        found = getattr(importlib.import_module(module_name), name) if module_name else None
    except (ImportError, AttributeError) as exc:
        raise MasConfigError(f"{key}: cannot import {path!r}: {exc}") from None
    if not (isinstance(found, type) and issubclass(found, TrainerHook)):
        raise MasConfigError(f"{key}: {path!r} is not a TrainerHook subclass (module.Class)")
    return found


def hook_overrides(name: str, hook_class: type[TrainerHook], **options: object) -> list[str]:
    """The hydra command-line overrides that switch `hook_class` on as `trainer_hooks.<name>` with `options`."""
    target = f"{hook_class.__module__}.{hook_class.__name__}"
    return [
        f"+{HOOKS_KEY}.{name}.{TARGET_KEY}={target}",
        *(f"+{HOOKS_KEY}.{name}.{key}={value}" for key, value in options.items()),
    ]
