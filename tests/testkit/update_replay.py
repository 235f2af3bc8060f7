"""Replays an update batch that the update capture (`hooks.update_record.UpdateRecorder`) saved from verl's actor
through the local engine's `PolicyTrainer`, so that one update of the same weights on the same rows can be compared
across the engines."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from verl_mas.sample import VerlBatchTensors

NEEDED = ("prompts", "responses", "response_mask", "old_log_probs", "advantages")


@dataclass(frozen=True)
class CapturedUpdate:
    """The real rows of a captured update, laid out as the local engine lays out samples."""

    tensors: VerlBatchTensors  # old_log_probs are the ones verl's actor computed for this update
    advantages: torch.Tensor  # [N, R], zero past each response
    padding_rows: int  # rows verl added with a zero mask, left out here


def load_captured_update(path: Path) -> CapturedUpdate:
    """The update batch at `path` (written by `verl_mas.verl_engine.hooks.update_record.save_update_batch`).

    Raises:
        ValueError: a field the replay needs is missing, or a row's prompt, response and mask lengths disagree.
    """
    saved = torch.load(path)
    fields = saved["tensors"]
    missing = [name for name in NEEDED if name not in fields]
    if missing:
        raise ValueError(f"{path}: the captured update has no {missing}; it holds {sorted(fields)}")
    real = [i for i, padding in enumerate(saved["padding"]) if not padding]
    prompts = [fields["prompts"][i] for i in real]
    responses = [fields["responses"][i] for i in real]
    for name in ("response_mask", "old_log_probs", "advantages"):
        for i in real:
            if len(fields[name][i]) != len(fields["responses"][i]):
                raise ValueError(
                    f"{path}: row {i}'s {name} has {len(fields[name][i])} values for a response of "
                    f"{len(fields['responses'][i])} tokens"
                )
    if "input_ids" in fields:  # the sequence the actor scored is the prompt followed by the response
        for i in real:
            if not torch.equal(torch.cat([fields["prompts"][i], fields["responses"][i]]), fields["input_ids"][i]):
                raise ValueError(f"{path}: row {i}'s input_ids are not its prompt followed by its response")
    n, width_p, width_r = len(real), max(len(p) for p in prompts), max(len(r) for r in responses)

    def right_padded(name: str, dtype: torch.dtype) -> torch.Tensor:
        out = torch.zeros((n, width_r), dtype=dtype)
        for row, i in enumerate(real):
            out[row, : len(fields[name][i])] = fields[name][i].to(dtype)
        return out

    prompt_ids = torch.zeros((n, width_p), dtype=torch.long)
    prompt_mask = torch.zeros((n, width_p), dtype=torch.long)
    for row, prompt in enumerate(prompts):  # left padded, as verl lays out prompts
        prompt_ids[row, width_p - len(prompt) :] = prompt
        prompt_mask[row, width_p - len(prompt) :] = 1
    response_ids = right_padded("responses", torch.long)
    response_attention = torch.arange(width_r).unsqueeze(0) < torch.tensor([len(r) for r in responses]).unsqueeze(1)
    tensors = VerlBatchTensors(
        prompts=prompt_ids,
        responses=response_ids,
        input_ids=torch.cat([prompt_ids, response_ids], dim=1),
        attention_mask=torch.cat([prompt_mask, response_attention.long()], dim=1),
        response_mask=right_padded("response_mask", torch.float32),
        token_level_rewards=torch.zeros((n, width_r), dtype=torch.float32),
        old_log_probs=right_padded("old_log_probs", torch.float32),
        uid=np.array([f"row{i}" for i in real], dtype=object),
        role=np.array(["captured"] * n, dtype=object),
        turn=np.zeros(n, dtype=np.int64),
        policy=np.array([saved["policy"]] * n, dtype=object),
    )
    return CapturedUpdate(tensors, right_padded("advantages", torch.float32), len(saved["padding"]) - n)
