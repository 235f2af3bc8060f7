"""The phase check (`PhaseCheck`, a trainer hook): several policies run at once give what one policy after the other
gives, from the same batch and state."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import transfer_queue as tq
from transfer_queue import KVBatchMeta

from verl_mas.verl_engine.hooks.base import HookedTrainer, TrainerHook, WrittenPath

if TYPE_CHECKING:
    from verl_mas.verl_engine.phases import SplitWorkerGroup

logger = logging.getLogger(__name__)
MODES = ("sequential", "concurrent")  # a phase check's two runs of a phase


class PhaseCheck(TrainerHook):
    """With several policies, the first step a launch trains also runs the old log-prob and update phases one policy
    after another from the same batch and state, before the concurrent run the training goes on from, and writes
    both results to `folder`: per policy the old log-probs of each mode and the actor checkpoints before, after the
    sequential and after the concurrent update, and `summary.json` (largest differences). With one policy it does
    nothing.
    """

    def __init__(self, folder: str):
        if not (isinstance(folder, str) and folder):
            raise ValueError(f"folder must be a path, got {folder!r}")
        self.given_folder = folder
        self.folder = Path(os.path.abspath(os.path.expanduser(folder)))
        self.started = False  # a launch checks its first trained step only
        self.checking = False  # this step is the checked one

    def written_paths(self) -> list[WrittenPath]:
        return [WrittenPath("folder", self.given_folder, is_file=False)]

    def before_log_probs(self, trainer: HookedTrainer, parts: dict[str, KVBatchMeta]) -> None:
        self.checking = not self.started and len(trainer.policies) > 1
        if not self.checking:
            return
        self.started = True
        # the reference: one policy after the other, its metrics and timings dropped
        trainer.compute_old_log_probs(parts, {}, sequential=True)
        self._keep_old_log_probs(parts, "sequential")

    def after_log_probs(self, trainer: HookedTrainer, parts: dict[str, KVBatchMeta]) -> None:
        if self.checking:
            self._keep_old_log_probs(parts, "concurrent")

    def before_update(self, trainer: HookedTrainer, parts: dict[str, KVBatchMeta]) -> None:
        """The sequential update from the state saved before it, which is restored after it, so that training goes on
        from the concurrent update."""
        if not self.checking:
            return
        self._checkpoints(trainer, "before", save=True)
        trainer.update_actors(parts, {}, sequential=True)
        self._checkpoints(trainer, "sequential", save=True)
        self._checkpoints(trainer, "before", save=False)

    def after_update(self, trainer: HookedTrainer, parts: dict[str, KVBatchMeta]) -> None:
        if not self.checking:
            return
        self._checkpoints(trainer, "concurrent", save=True)
        self._write_summary(trainer.global_steps, list(parts))

    def _keep_old_log_probs(self, parts: dict[str, KVBatchMeta], mode: str) -> None:
        for policy, part in parts.items():
            data = tq.kv_batch_get(keys=part.keys, partition_id=part.partition_id, select_fields=["old_log_probs"])
            (self.folder / policy).mkdir(parents=True, exist_ok=True)
            rows = [row.detach().clone() for row in data["old_log_probs"].unbind()]
            torch.save(rows, self.folder / policy / f"old_log_probs_{mode}.pt")

    def _checkpoints(self, trainer: HookedTrainer, name: str, *, save: bool) -> None:
        """Save every policy's actor state (model, optimizer, lr schedule, rng) to, or load it from,
        <folder>/<policy>/<name>/actor, all policies at once."""

        def run(policy: str, group: SplitWorkerGroup) -> None:
            path = str(self.folder / policy / name / "actor")
            if save:
                group.save_checkpoint(path, None, trainer.global_steps, max_ckpt_to_keep=None)
            else:
                group.load_checkpoint(path, None, del_local_after_load=False)

        trainer.run_phase(f"phase_check_{'save' if save else 'load'}", run, step=trainer.global_steps)

    def _write_summary(self, step: int, policies: list[str]) -> None:
        """<folder>/summary.json: per policy, the largest difference between the sequential and the concurrent old
        log-probs and updated weights (0.0 when they are equal)."""
        summary = {"step": step, "policies": {}}
        for policy in policies:
            folder = self.folder / policy
            sequential, concurrent = (torch.load(folder / f"old_log_probs_{mode}.pt") for mode in MODES)
            differences = [float((a - b).abs().max()) for a, b in zip(sequential, concurrent, strict=True)]
            summary["policies"][policy] = {
                "old_log_prob_max_abs_diff": max(differences, default=0.0),
                "weight_max_abs_diff": checkpoint_difference(folder / "sequential", folder / "concurrent"),
                "update_changed_weights": checkpoint_difference(folder / "before", folder / "concurrent") > 0,
            }
        (self.folder / "summary.json").write_text(json.dumps(summary, indent=1))
        logger.warning("phase check at step %s: %s", step, summary["policies"])


def checkpoint_difference(first: Path, second: Path) -> float:
    """The largest |difference| between two verl actor checkpoints' model weights (every rank's shard file)."""
    names = sorted(path.name for path in (first / "actor").glob("model_world_size_*_rank_*.pt"))
    if not names:
        raise FileNotFoundError(f"no model shards under {first / 'actor'}")
    largest = 0.0
    for name in names:
        a, b = (torch.load(root / "actor" / name, map_location="cpu", weights_only=False) for root in (first, second))
        if a.keys() != b.keys():
            raise ValueError(f"{name}: the two checkpoints hold different parameters")
        for key, tensor in a.items():
            x, y = (t.to_local() if hasattr(t, "to_local") else t for t in (tensor, b[key]))
            largest = max(largest, float((x.float() - y.float()).abs().max()) if x.numel() else 0.0)
    return largest
