"""Group health: how well a step's advantage groups are formed (sizes, reward spread, prompts mixed, prompt offsets
left in the advantages), as metrics under one prefix, a once-per-run warning, and a check of a plain verl batch."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from verl_mas.advantage import GROUPINGS, Grouping, compute_at_grpo_advantage, group_ids
from verl_mas.sample import Sample

if TYPE_CHECKING:
    from verl.protocol import DataProto

GROUP_HEALTH_PREFIX = "group_health"
# "Nearly every group has zero variance": at or above this share of the groups of two or more samples. A healthy run
# stays well below it (the default run's training rollouts: 0.43 over its first 50 steps, 0.69 over its last 50);
# at 0.9 nine groups in ten give no gradient, so the step barely trains.
NEARLY_ALL_ZERO_VARIANCE = 0.9
# "Most groups are singletons": at or above this share of the groups. A group of one has advantage 0, so such a batch
# barely trains, yet passes the other checks; under AT-GRPO's tree every group holds K samples.
MOSTLY_SINGLETONS = 0.5
LOGGER = logging.getLogger(__name__)


@dataclass(frozen=True)
class GroupHealth:
    """One step's advantage groups, measured (see `group_health` for each figure's definition)."""

    grouping: str  # what keys the groups: a `mas.grouping` level, or the batch key of a verl batch ("uid")
    # whether every group should hold one prompt (AT-GRPO's groups under the tree rollout, verl's uid groups)
    expects_one_prompt: bool
    samples: int
    groups: int
    singleton_share: float
    zero_variance_share: float
    mixed_prompt_share: float
    prompt_offset_share: float
    # mean advantage per (role, turn), sorted; empty where the batch has no roles and turns
    role_turn_advantage: Mapping[tuple[str, int], float] = field(default_factory=dict)

    def metrics(self, prefix: str = GROUP_HEALTH_PREFIX) -> dict[str, float]:
        """Flat metrics: `<prefix>/groups`, `/samples`, `/singleton_share`, `/zero_variance_share`,
        `/mixed_prompt_share`, `/prompt_offset_share`, and `<prefix>/<role>/turn<turn>/advantage_mean`."""
        metrics = {
            f"{prefix}/groups": float(self.groups),
            f"{prefix}/samples": float(self.samples),
            f"{prefix}/singleton_share": self.singleton_share,
            f"{prefix}/zero_variance_share": self.zero_variance_share,
            f"{prefix}/mixed_prompt_share": self.mixed_prompt_share,
            f"{prefix}/prompt_offset_share": self.prompt_offset_share,
        }
        for (role, turn), mean in self.role_turn_advantage.items():
            metrics[f"{prefix}/{role}/turn{turn}/advantage_mean"] = mean
        return metrics

    def problems(self) -> dict[str, str]:
        """The failures this step shows, cause -> a sentence naming it: "mixed_prompts" (groups that should hold one
        prompt hold several), "singletons" (most groups hold one sample) and "zero_variance" (nearly every group
        gives no gradient)."""
        found = {}
        if self.expects_one_prompt and self.mixed_prompt_share > 0:
            found["mixed_prompts"] = (
                f"{self.mixed_prompt_share:.1%} of the {self.groups} advantage groups (grouped by {self.grouping}) "
                "hold samples that answered different prompts, where every group should share one prompt: the "
                "samples' group labels (task uid, role, turn) do not match their prompts, so the advantages compare "
                "replies to different questions (a bug in the rollout or in the labels)"
            )
        # only where every group should be one prompt's K samples: the no-tree ablation's later turns and the coarse
        # groupings may hold few samples by design
        if self.expects_one_prompt and self.singleton_share >= MOSTLY_SINGLETONS:
            found["singletons"] = (
                f"{self.singleton_share:.1%} of the {self.groups} advantage groups (grouped by {self.grouping}) hold a "
                f"single sample (this warns at {MOSTLY_SINGLETONS:.0%}): a group of one has nothing to compare with, "
                "so its advantage is 0 and its sample does not train; the group labels are finer than the prompts "
                "(e.g. a uid made per trajectory instead of per prompt), or one sample is drawn per prompt (K, or "
                "verl's rollout.n, of 1)"
            )
        if self.zero_variance_share >= NEARLY_ALL_ZERO_VARIANCE:
            found["zero_variance"] = (
                f"nearly every advantage group has zero reward variance ({self.zero_variance_share:.1%} of the groups "
                f"of two or more samples, grouped by {self.grouping}; this warns at {NEARLY_ALL_ZERO_VARIANCE:.0%}): "
                "their samples all get advantage 0, so the step barely trains; the tasks are too easy or too hard for "
                "the policy, or the reward too coarse to tell its replies apart"
            )
        return found


def group_health(
    rewards: np.ndarray | Sequence[float],
    advantages: np.ndarray | Sequence[float],
    groups: np.ndarray | Sequence,
    prompts: np.ndarray | Sequence,
    *,
    grouping: str,
    expects_one_prompt: bool,
    role: np.ndarray | Sequence | None = None,
    turn: np.ndarray | Sequence | None = None,
) -> GroupHealth:
    """The health of one step's advantage groups, from per-sample arrays of length n.

    Args:
        rewards: [n] each sample's score, as the estimator grouped it.
        advantages: [n] each sample's advantage.
        groups: [n] the group label of each sample (any hashable values, e.g. `advantage.group_ids`).
        prompts: [n] a label per distinct prompt (`prompt_codes`, `padded_prompt_codes`): equal labels, same prompt.
        grouping: what keyed the groups, for the report.
        expects_one_prompt: whether every group should hold samples of one prompt (then any mixing is a problem).
        role, turn: [n] each sample's role and turn, both or neither, for the mean advantage per (role, turn).

    The figures:
        - `groups`, `singleton_share`: the number of groups and the share of them with one sample;
        - `zero_variance_share`: among the groups of two or more samples, the share whose rewards are all equal (0
          when there is none);
        - `mixed_prompt_share`: the share of groups whose samples answered more than one prompt;
        - `prompt_offset_share`: the share of the advantages' variance that lies between prompts. With a_i the
          advantage of sample i, ā their mean over the N samples, and ā_p the mean over the n_p samples that answered
          prompt p: V = (1/N) Σ_i (a_i - ā)², B = (1/N) Σ_p n_p (ā_p - ā)², and the share is B / V (0 when V = 0).
          It is 0 when every prompt's advantages average to the batch mean (each group centred on one prompt, as
          AT-GRPO's tree groups are) and 1 when the advantage only says which prompt a sample answered;
        - `role_turn_advantage`: the mean advantage of each (role, turn).

    Raises:
        ValueError: an empty batch, arrays of other lengths than `rewards`, role without turn, a non-finite reward or
            advantage (naming its row).
    """
    rewards = _finite("rewards", rewards)
    n = len(rewards)
    if n == 0:
        raise ValueError("group_health: empty batch")
    advantages = _finite("advantages", advantages, n)
    if (role is None) != (turn is None):
        raise ValueError("group_health: pass both role and turn, or neither")
    group, group_count = _count_codes(_column("groups", groups, n))
    prompt, prompt_count = _count_codes(_column("prompts", prompts, n))
    sizes = np.bincount(group, minlength=group_count)
    highest = np.full(group_count, -np.inf)
    np.maximum.at(highest, group, rewards)
    lowest = np.full(group_count, np.inf)
    np.minimum.at(lowest, group, rewards)
    several = sizes > 1
    # distinct (group, prompt) pairs, counted per group
    pairs = np.unique(group * prompt_count + prompt)
    prompts_per_group = np.bincount(pairs // prompt_count, minlength=group_count)
    mean = advantages.mean()
    prompt_means = np.bincount(prompt, weights=advantages, minlength=prompt_count) / np.bincount(prompt)
    total = float(np.mean((advantages - mean) ** 2))
    between = float(np.mean((prompt_means[prompt] - mean) ** 2))
    return GroupHealth(
        grouping=grouping,
        expects_one_prompt=expects_one_prompt,
        samples=n,
        groups=group_count,
        singleton_share=float(np.mean(sizes == 1)),
        zero_variance_share=float(np.mean(highest[several] == lowest[several])) if several.any() else 0.0,
        mixed_prompt_share=float(np.mean(prompts_per_group > 1)),
        # B <= V exactly; the clip only removes rounding
        prompt_offset_share=min(between / total, 1.0) if total > 0 else 0.0,
        role_turn_advantage={} if role is None else _role_turn_means(role, turn, advantages),
    )


def coarser_health(
    scores: np.ndarray | Sequence[float],
    prompts: np.ndarray | Sequence,
    *,
    index: np.ndarray | Sequence,
    role: np.ndarray | Sequence,
    turn: np.ndarray | Sequence,
    grouping: Grouping,
    norm_adv_by_std: bool = True,
) -> list[GroupHealth]:
    """The health each grouping coarser than `grouping` would have on this same batch: its own groups and its own
    advantages of the same scores. A run under AT-GRPO then shows, without a second run, how much of the advantage a
    coarser grouping would leave as role and turn offsets (`group_health/task/prompt_offset_share`): what the finer
    key removes. Their metrics go under `group_health/<grouping>/`; they never warn (no step trained on them)."""
    scores = _finite("scores", scores)
    rows = torch.as_tensor(scores, dtype=torch.float64).unsqueeze(-1)
    found = []
    for level in GROUPINGS[GROUPINGS.index(grouping) + 1 :]:
        advantages, _ = compute_at_grpo_advantage(
            rows,
            torch.ones_like(rows),
            index=index,
            role=role,
            turn=turn,
            grouping=level,
            norm_adv_by_std=norm_adv_by_std,
        )
        groups = group_ids(len(scores), index=index, role=role, turn=turn, grouping=level)
        found.append(
            group_health(scores, advantages[:, 0].numpy(), groups, prompts, grouping=level, expects_one_prompt=False)
        )
    return found


def coarser_metrics(found: Sequence[GroupHealth]) -> dict[str, float]:
    """`coarser_health`'s findings as flat metrics, each under `group_health/<grouping>/`."""
    return {
        key: value
        for health in found
        for key, value in health.metrics(f"{GROUP_HEALTH_PREFIX}/{health.grouping}").items()
    }


def _role_turn_means(role: Any, turn: Any, advantages: np.ndarray) -> dict[tuple[str, int], float]:
    """The mean advantage of each (role, turn), sorted by role and turn."""
    n = len(advantages)
    role_codes, role_names = _factorize(_column("role", role, n))
    turn_codes, turn_values = _factorize(_column("turn", turn, n).astype(np.int64))
    key, key_count = _count_codes(role_codes * len(turn_values) + turn_codes)
    sums = np.bincount(key, weights=advantages, minlength=key_count)
    counts = np.bincount(key, minlength=key_count)
    first = np.unique(key, return_index=True)[1]  # a row of each key, to read its role and turn
    means = {
        (str(role_names[role_codes[row]]), int(turn_values[turn_codes[row]])): float(sums[k] / counts[k])
        for k, row in enumerate(first)
    }
    return dict(sorted(means.items()))


def sample_group_health(
    samples: Sequence[Sample], advantages: np.ndarray | torch.Tensor, grouping: Grouping, *, tree: bool = True
) -> GroupHealth:
    """The health of the advantage groups of rolled-out samples (the local engine's step), grouped by `grouping`;
    with `tree` (the tree rollout), AT-GRPO's (task, role, turn) groups must each hold one prompt."""
    index, role, turn = _sample_labels(samples)
    return group_health(
        [s.reward for s in samples],
        np.asarray(advantages, dtype=np.float64),
        group_ids(len(samples), index=index, role=role, turn=turn, grouping=grouping),
        prompt_codes([s.prompt_ids for s in samples]),
        grouping=grouping,
        expects_one_prompt=tree and grouping == "task_role_turn",
        role=role,
        turn=turn,
    )


def sample_coarser_health(samples: Sequence[Sample], grouping: Grouping, norm_adv_by_std: bool) -> list[GroupHealth]:
    """`coarser_health` of rolled-out samples: the groupings coarser than the run's, on the samples it trained on."""
    index, role, turn = _sample_labels(samples)
    prompts = prompt_codes([s.prompt_ids for s in samples])
    return coarser_health(
        [s.reward for s in samples], prompts, index=index, role=role, turn=turn, grouping=grouping,
        norm_adv_by_std=norm_adv_by_std,
    )  # fmt: skip


def _sample_labels(samples: Sequence[Sample]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    index = np.array([s.task_uid for s in samples], dtype=object)
    role = np.array([s.role for s in samples], dtype=object)
    turn = np.array([s.turn for s in samples], dtype=np.int64)
    return index, role, turn


def prompt_codes(prompts: Sequence[Sequence[int]]) -> np.ndarray:
    """[n] int64 codes of prompts given as token id sequences (hashed as tuples): equal ids, equal code."""
    import pandas as pd

    # a Series keeps each tuple one element (a NumPy array of equal-length tuples would be 2-D)
    return _factorize(pd.Series([tuple(ids) for ids in prompts], dtype=object).to_numpy())[0]


def padded_prompt_codes(ids: torch.Tensor | np.ndarray, mask: torch.Tensor | np.ndarray | None = None) -> np.ndarray:
    """[n] int64 codes of the rows of a padded [n, P] prompt id tensor: rows equal on their `mask`ed-in positions
    (all positions without a mask) get one code, wherever their padding lies."""
    ids = _numpy(ids).astype(np.int64)
    if ids.ndim != 2:
        raise ValueError(f"group_health: prompt ids must be [batch, length], got shape {ids.shape}")
    if mask is not None:
        mask = _numpy(mask).astype(bool)
        if mask.shape != ids.shape:
            raise ValueError(f"group_health: prompt mask shape {mask.shape} != prompt ids shape {ids.shape}")
        # each row's tokens pushed to its left edge, padded with -1 (no token id), so that the padding's width and
        # side do not tell equal prompts apart
        order = np.argsort(~mask, axis=1, kind="stable")
        ids = np.where(np.take_along_axis(mask, order, axis=1), np.take_along_axis(ids, order, axis=1), -1)
    return np.unique(ids, axis=0, return_inverse=True)[1].reshape(-1).astype(np.int64)


def row_advantages(advantages: torch.Tensor, response_mask: torch.Tensor) -> np.ndarray:
    """[n] each row's advantage as the update sees it: the mean over its response tokens (one value per response
    under GRPO and AT-GRPO), 0 for a row with no response token."""
    values = _numpy(advantages).astype(np.float64)
    mask = _numpy(response_mask).astype(np.float64)
    if values.shape != mask.shape:
        raise ValueError(f"group_health: advantages shape {values.shape} != response_mask shape {mask.shape}")
    tokens = mask.sum(axis=1)
    return np.divide((values * mask).sum(axis=1), tokens, out=np.zeros(len(tokens)), where=tokens > 0)


def verl_batch_health(data: DataProto, *, group_key: str = "uid") -> GroupHealth:
    """The group health of a plain verl batch after its advantage step (verl's GRPO groups by `uid`).

    Reads `non_tensor_batch[group_key]`, `batch["advantages"]`, `batch["token_level_rewards"]` (the scores the
    estimator grouped; `token_level_scores` where there are no rewards), the response mask (`response_mask`, else the
    response part of `attention_mask`) and the prompts (`prompts`, else the prompt part of `input_ids`, the prompt
    part of `attention_mask` telling tokens from padding). Every uid group should hold one prompt repeated n times.

    Raises:
        ValueError: a key it needs is missing (naming it), or the batch is empty.
    """
    labels = data.non_tensor_batch
    if group_key not in labels:
        raise ValueError(f"verl_batch_health: the batch has no non_tensor_batch[{group_key!r}] to group by")
    if "advantages" not in set(data.batch.keys()):
        raise ValueError("verl_batch_health: the batch has no 'advantages' (run it after the advantage step)")
    scores, response_mask, prompts = _verl_batch_rows(data)
    return group_health(
        scores,
        row_advantages(data.batch["advantages"], response_mask),
        np.asarray(labels[group_key], dtype=object),
        prompts,
        grouping=group_key,
        expects_one_prompt=True,
    )


def verl_batch_coarser_health(
    data: DataProto, *, task_key: str = "index", role_key: str = "role", turn_key: str = "turn",
    norm_adv_by_std: bool = True,
) -> list[GroupHealth]:  # fmt: skip
    """`coarser_health` of a plain verl batch whose rows carry a task, a role and a turn (`non_tensor_batch`): what one
    group per task and one per (task, role) would leave as offsets on these scores; log it with `coarser_metrics`.

    Raises:
        ValueError: a key it needs is missing (naming it), or the batch is empty.
    """
    labels = data.non_tensor_batch
    missing = [key for key in (task_key, role_key, turn_key) if key not in labels]
    if missing:
        raise ValueError(f"verl_batch_coarser_health: the batch has no non_tensor_batch[{missing[0]!r}]")
    scores, _, prompts = _verl_batch_rows(data)
    return coarser_health(
        scores,
        prompts,
        index=np.asarray(labels[task_key], dtype=object),
        role=np.asarray(labels[role_key], dtype=object),
        turn=np.asarray(labels[turn_key]).astype(np.int64),
        grouping="task_role_turn",
        norm_adv_by_std=norm_adv_by_std,
    )


def _verl_batch_rows(data: DataProto) -> tuple[np.ndarray, Any, np.ndarray]:
    """A verl batch's per-row scores, its response mask and its prompts' codes (`verl_batch_health` says which keys)."""
    batch = data.batch
    keys = set(batch.keys())
    reward_key = next((k for k in ("token_level_rewards", "token_level_scores") if k in keys), None)
    if reward_key is None:
        raise ValueError("verl_batch_health: the batch has neither 'token_level_rewards' nor 'token_level_scores'")
    if "responses" not in keys and not {"prompts", "response_mask"} <= keys:
        raise ValueError("verl_batch_health: the batch has no 'responses' to tell its prompt and response parts")
    width = batch["responses"].shape[1] if "responses" in keys else batch["response_mask"].shape[1]
    attention = batch["attention_mask"] if "attention_mask" in keys else None
    if "response_mask" in keys:
        response_mask = batch["response_mask"]
    elif attention is not None:
        response_mask = attention[:, -width:]
    else:
        raise ValueError("verl_batch_health: the batch has neither 'response_mask' nor 'attention_mask'")
    if "prompts" in keys:
        prompts = batch["prompts"]
    elif "input_ids" in keys:
        prompts = batch["input_ids"][:, :-width]
    else:
        raise ValueError("verl_batch_health: the batch has neither 'prompts' nor 'input_ids'")
    prompt_mask = attention[:, : prompts.shape[1]] if attention is not None else None
    scores = _numpy(batch[reward_key].sum(dim=-1)).astype(np.float64)
    return scores, response_mask, padded_prompt_codes(prompts, prompt_mask)


class GroupHealthWarnings:
    """Logs each of `GroupHealth.problems`' causes once (WARNING), the first step it shows: one per run and cause."""

    def __init__(self, logger: logging.Logger = LOGGER) -> None:
        self.logger = logger
        self.warned: set[str] = set()

    def check(self, health: GroupHealth, step: int | None = None) -> list[str]:
        """Warn of the causes `health` shows that were not warned of yet; returns them."""
        new = {cause: text for cause, text in health.problems().items() if cause not in self.warned}
        for cause, text in new.items():
            where = f" at step {step}" if step is not None else ""
            self.logger.warning("group health%s (%s): %s", where, cause, text)
        self.warned |= set(new)
        return list(new)


def _factorize(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Dense int64 codes of `values`, in order of first appearance, and the distinct values (a hash table: no sort,
    no per-item loop)."""
    import pandas as pd  # on first use, as advantage.py: pandas is slow to import

    try:
        codes, uniques = pd.factorize(values, use_na_sentinel=False)
    except TypeError:  # unhashable labels (lists): compare by their text
        codes, uniques = pd.factorize(values.astype(str), use_na_sentinel=False)
    return codes.astype(np.int64, copy=False), np.asarray(uniques, dtype=object)


def _count_codes(values: np.ndarray) -> tuple[np.ndarray, int]:
    codes, uniques = _factorize(values)
    return codes, len(uniques)


def _numpy(values: Any) -> np.ndarray:
    return values.detach().cpu().numpy() if isinstance(values, torch.Tensor) else np.asarray(values)


def _column(name: str, values: Any, n: int) -> np.ndarray:
    # a list becomes an object array, so that labels of mixed types stay distinct
    array = _numpy(values) if isinstance(values, np.ndarray | torch.Tensor) else np.asarray(values, dtype=object)
    array = array.reshape(-1)
    if array.shape[0] != n:
        raise ValueError(f"group_health: {name} has {array.shape[0]} entries for a batch of {n}")
    return array


def _finite(name: str, values: Any, n: int | None = None) -> np.ndarray:
    array = _numpy(values).astype(np.float64).reshape(-1)
    if n is not None and array.shape[0] != n:
        raise ValueError(f"group_health: {name} has {array.shape[0]} entries for a batch of {n}")
    bad = np.flatnonzero(~np.isfinite(array))
    if bad.size:
        raise ValueError(f"group_health: non-finite {name} in rows {bad[:5].tolist()}")
    return array
