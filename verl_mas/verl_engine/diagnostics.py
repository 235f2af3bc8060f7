"""Trainer hooks that check the engine (`trainer_hooks:`): the update audit and capture (what each actor update
received) and the phase check (several policies at once give what one after the other gives)."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import transfer_queue as tq
from tensordict import TensorDict
from transfer_queue import KVBatchMeta

from verl_mas.verl_engine.batch import SampleTags, batch_tags
from verl_mas.verl_engine.hooks import TrainerHook

if TYPE_CHECKING:
    from verl_mas.verl_engine.phases import SplitWorkerGroup
    from verl_mas.verl_engine.trainer import AtGrpoTrainer

logger = logging.getLogger(__name__)
MODES = ("sequential", "concurrent")  # a phase check's two runs of a phase

# ------------------------------------------------------------------ the update audit and capture


class UpdateRecorder(TrainerHook):
    """What each policy's update is about to receive, fetched once as its worker fetches it, then

    - with `audit` (a JSONL path): one line per step and policy, the fields and rows (task, role, turn, advantage,
      sampler-vs-actor log-prob gap) the update received (`update_audit_record`);
    - with `capture` (a folder): the update batch's tensor fields, to <capture>/step_<n>/<policy>.pt, to replay the
      update elsewhere (`save_update_batch`; several MB a step).
    """

    def __init__(self, audit: str | None = None, capture: str | None = None):
        for key, value in (("audit", audit), ("capture", capture)):
            if value is not None and not (isinstance(value, str) and value):
                raise ValueError(f"{key} must be a path or null, got {value!r}")
        if audit is None and capture is None:
            raise ValueError("set audit (a JSONL path), capture (a folder) or both")
        self.audit, self.capture = audit, capture

    def before_update(self, trainer: AtGrpoTrainer, parts: dict[str, KVBatchMeta]) -> None:
        for policy, part in parts.items():
            data = fetch_update_batch(part)
            if self.audit:
                append_update_audit(self.audit, trainer.global_steps, policy, part, data)
            if self.capture:
                save_update_batch(self.capture, trainer.global_steps, policy, part, data)


def update_audit_record(step: int, policy: str, fields: Sequence[str], data: TensorDict, tags: SampleTags) -> dict:
    """What one policy's actor update received: its field list and, per row, the tags and the advantage.

    A row's `advantage` is the mean over its response tokens and `advantage_spread` the max - min there (AT-GRPO
    spreads one value over a sample's tokens, so the spread is 0); both are None when the batch has no advantages.
    `logprob_gap` is the largest |sampler log-prob - actor's recomputed log-prob| over the row's response tokens
    (None without both), which shows whether the rollout served the weights the actor trains.
    """

    def per_row(name: str) -> list[torch.Tensor] | None:
        return data[name].unbind() if name in data.keys() else None

    rows = []
    advantages, masks = per_row("advantages"), per_row("response_mask")
    sampler, actor = per_row("rollout_log_probs"), per_row("old_log_probs")
    for i in range(len(tags.padding)):
        row = {
            "task_uid": str(tags.task_uid[i]),
            "role": str(tags.role[i]),
            "turn": int(tags.turn[i]),
            "policy": str(tags.policy[i]),
            "padding": bool(tags.padding[i]),
            "reward": float(tags.mixed_reward[i]),
            "advantage": None,
            "advantage_spread": None,
            "logprob_gap": None,
        }
        rows.append(row)
        tokens = masks[i].bool() if masks is not None else None
        if tokens is None or not tokens.any():
            continue
        if advantages is not None:
            values = advantages[i][tokens].double()
            row["advantage"] = float(values.mean())
            row["advantage_spread"] = float(values.max() - values.min())
        if sampler is not None and actor is not None:
            row["logprob_gap"] = float((sampler[i][tokens].double() - actor[i][tokens].double()).abs().max())
    return {"step": step, "policy": policy, "fields": sorted(fields), "rows": rows}


def fetch_update_batch(part: KVBatchMeta) -> TensorDict:
    """What `part`'s update receives, fetched as verl's worker fetches it (the fields its metadata lists), plus the
    sample tags (`extra_fields`) even where that list leaves them out: one fetch serves the audit and the capture."""
    fields = list(part.fields or [])
    tagged = fields if "extra_fields" in fields else [*fields, "extra_fields"]
    return tq.kv_batch_get(keys=part.keys, partition_id=part.partition_id, select_fields=tagged)


def save_update_batch(folder: str, step: int, policy: str, part: KVBatchMeta, data: TensorDict) -> Path:
    """Save `data` (`fetch_update_batch(part)`) to <folder>/step_<step>/<policy>.pt, so that the update can be
    replayed elsewhere.

    The file holds {"step", "policy", "padding": [n] bool, "tensors": {field: the list of its n rows}}, nested and
    padded fields alike, for the fields `part`'s metadata lists; fields that are not tensors (the sample tags, prompts
    as text) are left out.
    """
    tensors = {}
    for name in part.fields or []:
        value = data.get(name, None)
        if isinstance(value, torch.Tensor):
            tensors[name] = [row.clone() for row in value.unbind()]
    padding = [bool(tag.get("is_padding", False)) for tag in part.tags]
    path = Path(os.path.expanduser(folder)).resolve() / f"step_{step}" / f"{policy}.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"step": step, "policy": policy, "padding": padding, "tensors": tensors}, path)
    return path


def append_update_audit(path: str, step: int, policy: str, part: KVBatchMeta, data: TensorDict) -> None:
    """Append the audit record of `data` (`fetch_update_batch(part)`) to the JSONL at `path`."""
    tags = batch_tags(data["extra_fields"], part.tags)
    record = update_audit_record(step, policy, list(part.fields or []), data, tags)
    path = os.path.expanduser(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps(record) + "\n")


# ------------------------------------------------------------------ the phase check: concurrent == sequential


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
        self.folder = Path(os.path.abspath(os.path.expanduser(folder)))
        self.started = False  # a launch checks its first trained step only
        self.checking = False  # this step is the checked one

    def before_log_probs(self, trainer: AtGrpoTrainer, parts: dict[str, KVBatchMeta]) -> None:
        self.checking = not self.started and len(trainer.policies) > 1
        if not self.checking:
            return
        self.started = True
        # the reference: one policy after the other, its metrics and timings dropped
        trainer.compute_old_log_probs(parts, {}, sequential=True)
        self._keep_old_log_probs(parts, "sequential")

    def after_log_probs(self, trainer: AtGrpoTrainer, parts: dict[str, KVBatchMeta]) -> None:
        if self.checking:
            self._keep_old_log_probs(parts, "concurrent")

    def before_update(self, trainer: AtGrpoTrainer, parts: dict[str, KVBatchMeta]) -> None:
        """The sequential update from the state saved before it, which is restored after it, so that training goes on
        from the concurrent update."""
        if not self.checking:
            return
        self._checkpoints(trainer, "before", save=True)
        trainer.update_actors(parts, {}, sequential=True)
        self._checkpoints(trainer, "sequential", save=True)
        self._checkpoints(trainer, "before", save=False)

    def after_update(self, trainer: AtGrpoTrainer, parts: dict[str, KVBatchMeta]) -> None:
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

    def _checkpoints(self, trainer: AtGrpoTrainer, name: str, *, save: bool) -> None:
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
