"""The update audit and capture (`UpdateRecorder`, a trainer hook): what each policy's actor update received, as one
JSONL line per step and policy, or as the update batch's tensors to replay the update elsewhere."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import torch
import transfer_queue as tq
from tensordict import TensorDict
from transfer_queue import KVBatchMeta

from verl_mas.verl_engine.batch import SampleTags, batch_tags
from verl_mas.verl_engine.hooks.base import HookedTrainer, TrainerHook, WrittenPath


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

    def written_paths(self) -> list[WrittenPath]:
        paths = [WrittenPath("audit", self.audit, is_file=True)] if self.audit is not None else []
        if self.capture is not None:
            paths.append(WrittenPath("capture", self.capture, is_file=False))
        return paths

    def before_update(self, trainer: HookedTrainer, parts: dict[str, KVBatchMeta]) -> None:
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
