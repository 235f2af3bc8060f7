"""The advantage step's pure pieces: per-row sample tags, restored rewards, AT-GRPO advantages through verl's
estimator registry, per-role and per-turn metrics, the health of the advantage groups, and the split of a batch by
policy."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from transfer_queue import KVBatchMeta

from verl_mas import ESTIMATOR
from verl_mas.advantage import group_ids, registered_estimator
from verl_mas.group_health import GroupHealth, coarser_health, group_health, padded_prompt_codes, row_advantages
from verl_mas.metrics import infra_failure_metrics


@dataclass(frozen=True)
class SampleTag:
    """One sample's tags, one extra_fields key per field: the `mas_agent` loop writes them (`fields`) and
    `SampleTags.from_rows` reads them back, so this class is their one schema. A real row must carry the fields
    without a default; a row without a flag reads as its default."""

    task_uid: str
    role: str
    turn: int
    policy: str
    mixed_reward: float  # the sample's own reward (verl copies the last output's score over an episode's list)
    env_error: bool = False  # the episode's environment failed
    valid: bool = True
    infra_failure: bool = False  # the judge could not run the sample's move; it does not train
    # written for readers of the rollout rows; the advantage step does not read them
    branch: int = 0
    team_reward: float = 0.0
    local_reward: float = 0.0
    continued: bool = False

    def fields(self) -> dict[str, Any]:
        """The extra_fields entries of this tag."""
        return dataclasses.asdict(self)


TAG_KEYS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(SampleTag))
REQUIRED_TAG_KEYS: tuple[str, ...] = tuple(
    f.name for f in dataclasses.fields(SampleTag) if f.default is dataclasses.MISSING
)
# A padding row may carry no tags: blanks where a real row must have them.
_PADDING_BLANKS: dict[str, Any] = dict.fromkeys(REQUIRED_TAG_KEYS, "")


@dataclass(frozen=True)
class SampleTags:
    """Per-row tags the agent loop wrote into extra_fields, as arrays; padding rows carry no sample."""

    task_uid: np.ndarray  # [n] object
    role: np.ndarray  # [n] object
    turn: np.ndarray  # [n] int64
    policy: np.ndarray  # [n] object
    mixed_reward: np.ndarray  # [n] float64
    env_error: np.ndarray  # [n] bool
    valid: np.ndarray  # [n] bool
    padding: np.ndarray  # [n] bool
    infra_failure: np.ndarray  # [n] bool: the judge could not run the sample's move; it does not train

    @property
    def trained(self) -> np.ndarray:
        """[n] bool: the rows that take part in their groups and the update (no padding, no infra failure)."""
        return ~self.padding & ~self.infra_failure

    @classmethod
    def from_rows(cls, extra_fields: Sequence[Any], padding: Sequence[bool]) -> SampleTags:
        """Read the `SampleTag` of every row.

        Raises:
            ValueError: a real row lacks a tag (it was not produced by the `mas_agent` loop), naming row and key.
        """
        if len(extra_fields) != len(padding):
            raise ValueError(f"{ESTIMATOR} step: {len(extra_fields)} rows of extra_fields for {len(padding)} tags")
        pad = np.array([bool(p) for p in padding], dtype=bool)
        tags = []
        for row, (fields, is_padding) in enumerate(zip(extra_fields, pad, strict=True)):
            fields = fields if isinstance(fields, Mapping) else {}
            given = {key: fields[key] for key in TAG_KEYS if fields.get(key) is not None}
            missing = [key for key in REQUIRED_TAG_KEYS if key not in given]
            if missing and not is_padding:
                raise ValueError(
                    f"{ESTIMATOR} step: row {row} has no extra_fields {missing}; was it produced by the mas_agent loop?"
                )
            tags.append(SampleTag(**(_PADDING_BLANKS | given)))
        real = list(zip(tags, ~pad, strict=True))
        return cls(
            task_uid=np.array([str(t.task_uid) for t in tags], dtype=object),
            role=np.array([str(t.role) for t in tags], dtype=object),
            turn=np.array([int(t.turn or 0) for t in tags], dtype=np.int64),
            policy=np.array([str(t.policy) for t in tags], dtype=object),
            mixed_reward=np.array([float(t.mixed_reward) if is_real else 0.0 for t, is_real in real], dtype=np.float64),
            env_error=np.array([bool(t.env_error) for t in tags], dtype=bool),
            valid=np.array([bool(t.valid) for t in tags], dtype=bool),
            padding=pad,
            infra_failure=np.array([bool(t.infra_failure) and is_real for t, is_real in real], dtype=bool),
        )


def batch_tags(extra_fields: Any, kv_tags: Sequence[Mapping[str, Any]]) -> SampleTags:
    """The sample tags of a batch fetched from TransferQueue: its `extra_fields` column and its keys' tags."""
    return SampleTags.from_rows(_rows_of(extra_fields), [tag.get("is_padding", False) for tag in kv_tags])


def _rows_of(column: Any) -> list:
    """A non-tensor column from TransferQueue as a list (a NonTensorStack, or the list tensordict returns)."""
    return list(column.tolist() if hasattr(column, "tolist") else column)


def reward_scores(tags: SampleTags, response_lengths: torch.Tensor, width: int) -> torch.Tensor:
    """[n, width] float32: each real row's mixed reward on its last response token (as verl places a reward).

    Padding rows get zeros. A row's length counts its tokens whether or not they are masked, so a sample whose
    response is a masked-out eos keeps its reward in its group.
    """
    scores = torch.zeros((len(tags.padding), width), dtype=torch.float32)
    real = torch.from_numpy(~tags.padding)
    rows = torch.nonzero(real).flatten()
    last = (response_lengths[rows] - 1).clamp(min=0)
    scores[rows, last] = torch.from_numpy(tags.mixed_reward[~tags.padding]).to(torch.float32)
    return scores


def at_grpo_advantages(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    tags: SampleTags,
    grouping: str,
    algorithm_config: Any,
) -> torch.Tensor:
    """[n, L] advantages from `at_grpo` grouped by (task uid, role, turn), (task uid, role) or task uid, as
    `grouping` ("task_role_turn", "task_role", "task") says.

    Padding rows and rows the judge could not run (`SampleTags.infra_failure`) take no part in any group and get
    zero advantages.
    """
    advantages = torch.zeros_like(token_level_rewards)
    real = tags.trained
    if not real.any():
        return advantages
    index = torch.from_numpy(np.nonzero(real)[0])
    real_advantages, _ = registered_estimator()(
        token_level_rewards=token_level_rewards[index],
        response_mask=response_mask[index],
        index=tags.task_uid[real],
        config=algorithm_config,
        role=tags.role[real],
        turn=tags.turn[real],
        grouping=grouping,
    )
    advantages[index] = real_advantages
    return advantages


def sample_metrics(tags: SampleTags, grouping: str) -> dict[str, float]:
    """Per-role reward, invalid-move share and zero-variance group share over the rows that train (a row the judge
    could not run has no real score), plus environment failures."""
    if not (~tags.padding).any():
        return {}
    metrics = {"mas/env_failed_tasks": float(len(set(tags.task_uid[~tags.padding & tags.env_error])))}
    real = tags.trained
    for role in sorted(set(tags.role[real])):
        rows = real & (tags.role == role)
        rewards = tags.mixed_reward[rows]
        metrics[f"mas/{role}/reward/mean"] = float(rewards.mean())
        metrics[f"mas/{role}/invalid_share"] = float((~tags.valid[rows]).mean())
        group = group_ids(
            len(rewards), index=tags.task_uid[rows], role=tags.role[rows], turn=tags.turn[rows], grouping=grouping
        )
        highest = np.full(group.max() + 1, -np.inf)
        np.maximum.at(highest, group, rewards)
        lowest = np.full(group.max() + 1, np.inf)
        np.minimum.at(lowest, group, rewards)
        metrics[f"mas/{role}/zero_variance_group_share"] = float((highest == lowest).mean())
    for turn in sorted(set(tags.turn[real].tolist())):
        rows = real & (tags.turn == turn)
        metrics[f"mas/turn_{turn}/reward/mean"] = float(tags.mixed_reward[rows].mean())
        metrics[f"mas/turn_{turn}/invalid_share"] = float((~tags.valid[rows]).mean())
        metrics[f"mas/turn_{turn}/samples"] = float(rows.sum())
    return metrics


def prompt_codes_of(prompts: torch.Tensor) -> np.ndarray:
    """[n] one code per distinct prompt of the rows' `prompts`: a nested (jagged) tensor, as TransferQueue returns it,
    or a padded one."""
    return padded_prompt_codes(prompts.to_padded_tensor(padding=-1) if prompts.is_nested else prompts)


def trained_scores(tags: SampleTags, token_level_rewards: torch.Tensor) -> tuple[np.ndarray, torch.Tensor, np.ndarray]:
    """The rows that train: their mask over the batch, their indices, and each one's score (its summed reward)."""
    real = tags.trained
    rows = torch.from_numpy(np.nonzero(real)[0])
    return real, rows, token_level_rewards[rows].sum(dim=-1).double().numpy()


def step_group_health(
    tags: SampleTags,
    token_level_rewards: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    prompt_codes: np.ndarray,
    grouping: str,
) -> GroupHealth | None:
    """The health of the advantage step's groups under `grouping`, over the rows that train (None when none does):
    each row's score is its summed reward and its advantage the one on its response tokens (`row_advantages`). Under
    "task_role_turn" every group is one tree node's K candidates, so it must hold one prompt."""
    real, rows, scores = trained_scores(tags, token_level_rewards)
    if not len(rows):
        return None
    role, turn = tags.role[real], tags.turn[real]
    return group_health(
        scores,
        row_advantages(advantages[rows], response_mask[rows]),
        group_ids(len(rows), index=tags.task_uid[real], role=role, turn=turn, grouping=grouping),
        prompt_codes[real],
        grouping=grouping,
        expects_one_prompt=grouping == "task_role_turn",
        role=role,
        turn=turn,
    )


def step_coarser_health(
    tags: SampleTags,
    token_level_rewards: torch.Tensor,
    prompt_codes: np.ndarray,
    grouping: str,
    norm_adv_by_std: bool,
) -> list[GroupHealth]:
    """`coarser_health` of the advantage step's rows that train: what the groupings coarser than `mas.grouping` would
    give on this batch's scores."""
    real, rows, scores = trained_scores(tags, token_level_rewards)
    if not len(rows):
        return []
    return coarser_health(
        scores, prompt_codes[real], index=tags.task_uid[real],
        role=tags.role[real], turn=tags.turn[real], grouping=grouping, norm_adv_by_std=norm_adv_by_std,
    )  # fmt: skip


def infra_failures(tags: SampleTags, max_share: float) -> dict[str, float]:
    """`mas/infra_failures` of a batch; raises `InfraFailureLimit` past `mas.max_infra_failure_share`."""
    samples = int((~tags.padding).sum())
    return infra_failure_metrics(int(tags.infra_failure.sum()), samples, max_share, "mas.max_infra_failure_share")


def split_by_policy(
    batch: KVBatchMeta, policy_of_row: Sequence[str], policies: Sequence[str]
) -> dict[str, KVBatchMeta]:
    """The batch's rows per policy, in `policies` order (a policy with no rows this step is left out).

    Raises:
        ValueError: a row names a policy outside `policies`.
    """
    unknown = sorted(set(policy_of_row) - set(policies))
    if unknown:
        raise ValueError(
            f"{ESTIMATOR} step: rows name policies {unknown}, not served by this trainer ({list(policies)})"
        )
    parts = {}
    for policy in policies:
        keys = [key for key, owner in zip(batch.keys, policy_of_row, strict=True) if owner == policy]
        if keys:
            parts[policy] = batch.select_keys(keys)
    return parts
