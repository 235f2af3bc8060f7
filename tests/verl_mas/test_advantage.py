"""Tests of the at_grpo estimator: hand-computed values, verl equivalence, grouping, errors."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage, get_adv_estimator_fn

from verl_mas.advantage import (
    GROUPINGS,
    GroupingError,
    check_grouping,
    compute_at_grpo_advantage,
    group_ids,
    registered_estimator,
)


def outcome_rewards(scores: list[float], lengths: list[int], width: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    rewards = torch.zeros(len(scores), width)
    mask = torch.zeros(len(scores), width)
    for i, (score, length) in enumerate(zip(scores, lengths, strict=True)):
        mask[i, :length] = 1
        rewards[i, max(length - 1, 0)] = score
    return rewards, mask


# Rewards on a dyadic grid make zero-spread groups exact. The comparison with verl runs in float64:
# in float32 verl's own group mean (e.g. of 4, 4, 4.125) rounds by ~4e-7, and dividing by a small std
# amplifies that past 1e-6, which would test verl's rounding rather than the algorithm.
dyadic = st.integers(min_value=-64, max_value=64).map(lambda k: k / 8)


def test_hand_computed_group_by_task_role_turn():
    # Two tasks share role/turn labels; grouping must keep tasks apart.
    rewards, mask = outcome_rewards([1.0, 3.0, 2.0, 2.0, 5.0], [2, 3, 1, 4, 2])
    index = np.array(["t0", "t0", "t1", "t1", "t1"], dtype=object)
    role = ["a", "a", "a", "a", "b"]
    turn = [0, 0, 0, 0, 0]
    adv, ret = compute_at_grpo_advantage(rewards, mask, index, role=role, turn=turn)
    # group (t0,a,0): scores 1,3: mean 2, unbiased std sqrt(2) -> -1/sqrt2, +1/sqrt2
    # group (t1,a,0): scores 2,2: zero spread -> advantage 0
    assert adv[0, 0].item() == pytest.approx(-1 / math.sqrt(2))
    assert adv[1, 2].item() == pytest.approx(1 / math.sqrt(2))
    assert torch.equal(adv, ret)
    assert adv[2:4].abs().max().item() == 0.0
    # masked tokens are zero
    assert adv[0, 2].item() == 0 and adv[1, 3].item() == 0
    # singleton group (t1,b,0): mean 0, std 1 -> advantage = score / (1 + eps)
    assert adv[4, 0].item() == pytest.approx(5.0)
    assert adv[4, 1].item() == pytest.approx(5.0)


def test_zero_variance_group_gives_zero_advantage():
    rewards, mask = outcome_rewards([0.5, 0.5, 0.5], [1, 1, 1])
    adv, _ = compute_at_grpo_advantage(rewards, mask, np.array(["x"] * 3, dtype=object))
    assert torch.count_nonzero(adv) == 0


def test_without_std_normalisation_centres_only():
    rewards, mask = outcome_rewards([1.0, 2.0, 6.0], [1, 1, 1])
    index = np.array(["g"] * 3, dtype=object)
    adv, _ = compute_at_grpo_advantage(rewards, mask, index, norm_adv_by_std=False)
    assert adv[:, 0].tolist() == pytest.approx([-2.0, -1.0, 3.0])
    # the same switch read from verl's algorithm config
    cfg = OmegaConf.create({"norm_adv_by_std_in_grpo": False})
    adv_cfg, _ = compute_at_grpo_advantage(rewards, mask, index, cfg)
    assert torch.allclose(adv, adv_cfg)
    adv_default, _ = compute_at_grpo_advantage(rewards, mask, index, OmegaConf.create({}))
    assert adv_default[2, 0].item() == pytest.approx(3.0 / (math.sqrt(7.0) + 1e-6))


def test_role_and_turn_split_a_task_into_groups():
    # same task, 2 roles x 2 turns x 2 candidates: each (role, turn) pair normalised on its own
    scores = [0.0, 1.0, 10.0, 30.0, 5.0, 5.0, -1.0, 1.0]
    rewards, mask = outcome_rewards(scores, [1] * 8)
    index = ["t"] * 8
    role = ["a", "a", "b", "b", "a", "a", "b", "b"]
    turn = [0, 0, 0, 0, 1, 1, 1, 1]
    adv, _ = compute_at_grpo_advantage(rewards, mask, index, role=role, turn=turn, epsilon=1e-12)
    s = 1 / math.sqrt(2)
    assert adv[:, 0].tolist() == pytest.approx([-s, s, -s, s, 0.0, 0.0, -s, s], abs=1e-6)
    # grouped by task only, all eight share one mean
    adv_task, _ = compute_at_grpo_advantage(rewards, mask, index)
    assert adv_task[:, 0].sum().item() == pytest.approx(0.0, abs=1e-5)
    assert adv_task[3, 0].item() > adv_task[2, 0].item() > adv_task[0, 0].item()


def test_group_ids_are_dense_and_keep_distinct_keys_apart():
    index, role, turn = ["a", "a", "b", "b", "a", "b"], ["x", "y", "x", "x", "x", "y"], [0, 0, 0, 1, 0, 1]
    ids = group_ids(6, index=index, role=role, turn=turn).tolist()
    keys = list(zip(index, role, turn, strict=True))
    assert sorted(set(ids)) == list(range(5))
    for i in range(6):
        for j in range(6):
            assert (ids[i] == ids[j]) == (keys[i] == keys[j])
    # a uid that looks numeric is still its own key ("1" and "01" are different tasks)
    first, second = group_ids(2, index=np.array(["1", "01"], dtype=object)).tolist()
    assert first != second


def test_grouping_chooses_the_key_of_one_batch_by_hand():
    # One task, roles a and b at turn 0, two candidates each: scores 0, 2 (a) and 4, 10 (b).
    rewards, mask = outcome_rewards([0.0, 2.0, 4.0, 10.0], [1, 1, 1, 1])
    keys = {"index": ["t"] * 4, "role": ["a", "a", "b", "b"], "turn": [0, 0, 0, 0], "epsilon": 0.0}
    by_role_turn, _ = compute_at_grpo_advantage(rewards, mask, grouping="task_role_turn", **keys)
    s = 1 / math.sqrt(2)  # (a): mean 1, std sqrt 2; (b): mean 7, std sqrt 18
    assert by_role_turn[:, 0].tolist() == pytest.approx([-s, s, -s, s])
    by_task, _ = compute_at_grpo_advantage(rewards, mask, grouping="task", **keys)
    # one group: mean 4, squared deviations 16 + 4 + 0 + 36 = 56, unbiased std sqrt(56 / 3)
    std = math.sqrt(56 / 3)
    assert by_task[:, 0].tolist() == pytest.approx([-4 / std, -2 / std, 0.0, 6 / std])
    # the default is AT-GRPO's key
    assert torch.equal(compute_at_grpo_advantage(rewards, mask, **keys)[0], by_role_turn)


# One batch for every grouping level: task t, roles a and b, turns 0 and 1, two candidates each; task u's two samples
# (scores 10, 10) sit in groups of their own at every level, so t's values show that tasks never mix.
LEVEL_BATCH = [
    ("t", "a", 0, 0.0), ("t", "a", 0, 2.0), ("t", "a", 1, 4.0), ("t", "a", 1, 6.0),
    ("t", "b", 0, 1.0), ("t", "b", 0, 1.0), ("t", "b", 1, 3.0), ("t", "b", 1, 7.0),
    ("u", "a", 0, 10.0), ("u", "a", 0, 10.0),
]  # fmt: skip
S2 = math.sqrt(2)
LEVEL_EXPECTED = {
    # groups (t,a,0) 0 2, (t,a,1) 4 6, (t,b,1) 3 7: each +-1/sqrt2 about its mean; (t,b,0) 1 1 and (u,a,0): zero spread
    "task_role_turn": [-1 / S2, 1 / S2, -1 / S2, 1 / S2, 0.0, 0.0, -1 / S2, 1 / S2, 0.0, 0.0],
    # (t,a): 0 2 4 6, mean 3, unbiased std sqrt(20/3); (t,b): 1 1 3 7, mean 3, std sqrt(24/3) = 2 sqrt2
    "task_role": [
        *(d / math.sqrt(20 / 3) for d in (-3, -1, 1, 3)),
        *(d / (2 * S2) for d in (-2, -2, 0, 4)),
        0.0,
        0.0,
    ],
    # (t): all eight, mean 3, squared deviations 9+1+1+9+4+4+0+16 = 44, unbiased std sqrt(44/7): role b's tied
    # turn-0 pair gets -2/std each instead of 0, and role a's 4, below its (task, role, turn) mean, gets +1/std
    "task": [*(d / math.sqrt(44 / 7) for d in (-3, -1, 1, 3, -2, -2, 0, 4)), 0.0, 0.0],
}
LEVEL_UID_KEYS = {"task_role_turn": (0, 1, 2), "task_role": (0, 1), "task": (0,)}


def level_batch() -> tuple[torch.Tensor, torch.Tensor, dict[str, list]]:
    rewards, mask = outcome_rewards([row[3] for row in LEVEL_BATCH], [1, 2, 3, 4, 1, 2, 3, 4, 2, 2])
    index, role, turn, _ = (list(column) for column in zip(*LEVEL_BATCH, strict=True))
    columns = {"index": index, "role": role, "turn": turn}
    return rewards, mask, columns


@pytest.mark.parametrize("grouping", GROUPINGS)
def test_each_grouping_level_by_hand_through_verls_registry(grouping):
    rewards, mask, columns = level_batch()
    estimator = get_adv_estimator_fn("at_grpo")  # as a verl config selecting it gets it
    adv, ret = estimator(token_level_rewards=rewards, response_mask=mask, config=None, grouping=grouping, **columns)
    assert torch.equal(adv, ret)
    assert adv.sum(dim=1).div(mask.sum(dim=1)).tolist() == pytest.approx(LEVEL_EXPECTED[grouping], abs=1e-5)
    assert torch.equal(adv, adv[:, :1] * mask)  # one value over each response's tokens, none outside it


@pytest.mark.parametrize("grouping", GROUPINGS)
def test_each_grouping_level_by_hand_through_verls_compute_advantage(grouping):
    """verl's dispatcher passes only `uid`: a trainer that calls verl's `compute_advantage` unchanged picks the level
    by the uid it writes (task; task|role; task|role|turn), and gets the same values as the keywords give."""
    from verl import DataProto
    from verl.trainer.ppo.ray_trainer import compute_advantage

    rewards, mask, _ = level_batch()
    uid = np.array(["|".join(str(row[i]) for i in LEVEL_UID_KEYS[grouping]) for row in LEVEL_BATCH], dtype=object)
    batch = DataProto.from_dict(
        tensors={"token_level_rewards": rewards, "response_mask": mask, "responses": torch.zeros(10, 4)},
        non_tensors={"uid": uid},
    )
    config = OmegaConf.create({"norm_adv_by_std_in_grpo": True, "gamma": 1.0, "lam": 1.0})
    out = compute_advantage(batch, adv_estimator="at_grpo", config=config)
    assert out.batch["advantages"][:, 0].tolist() == pytest.approx(LEVEL_EXPECTED[grouping], abs=1e-5)


@pytest.mark.parametrize("grouping", GROUPINGS)
def test_each_grouping_level_in_the_verl_engines_advantage_step(grouping):
    """The verl trainer's advantage step (`batch.at_grpo_advantages`, `mas.grouping`): the same values, with a
    padding row that joins no group."""
    from verl_mas.verl_engine.batch import SampleTags, at_grpo_advantages, reward_scores

    extra = [{"task_uid": t, "role": r, "turn": n, "policy": "p", "mixed_reward": x} for t, r, n, x in LEVEL_BATCH]
    tags = SampleTags.from_rows([*extra, dict(extra[0])], [False] * 10 + [True])
    lengths = torch.tensor([1, 2, 3, 4, 1, 2, 3, 4, 2, 2, 3])
    mask = (torch.arange(4).unsqueeze(0) < lengths.unsqueeze(1)).float()
    scores = reward_scores(tags, lengths, 4)
    advantages = at_grpo_advantages(scores, mask, tags, grouping, OmegaConf.create({"norm_adv_by_std_in_grpo": True}))
    assert advantages[:, 0].tolist() == pytest.approx([*LEVEL_EXPECTED[grouping], 0.0], abs=1e-5)
    assert advantages[-1].abs().sum() == 0


def test_group_ids_under_each_grouping():
    index, role, turn = ["t0", "t0", "t0", "t1"], ["a", "b", "a", "a"], [0, 0, 1, 0]
    assert group_ids(4, index=index, role=role, turn=turn).tolist() == [0, 1, 2, 3]
    assert group_ids(4, index=index, role=role, turn=turn, grouping="task_role").tolist() == [0, 1, 0, 2]
    assert group_ids(4, index=index, role=role, turn=turn, grouping="task").tolist() == [0, 0, 0, 1]
    # without role and turn the index is the whole key under every grouping (verl's dispatcher passes a uid only)
    assert group_ids(4, index=index).tolist() == [0, 0, 0, 1]
    assert group_ids(3).tolist() == [0, 0, 0]
    # labels numpy keeps as fixed-width text, labels that cannot be hashed, and missing labels are keys too
    assert group_ids(3, index=np.array(["x", "y", "x"])).tolist() == [0, 1, 0]
    assert group_ids(3, index=[[1], [2], [1]], role=["a"] * 3, turn=[0] * 3).tolist() == [0, 1, 0]
    assert group_ids(3, index=[None, "a", None]).tolist() == [0, 1, 0]


def test_combined_keys_never_collide():
    # codes (b, x) = (1, 0) and (a, y) = (0, 1) would meet in a key of index code + role code
    ids = group_ids(4, index=["a", "b", "a", "b"], role=["x", "x", "y", "y"], turn=[5, 5, 5, 5]).tolist()
    assert ids == [0, 1, 2, 3]
    # a first column with one value leaves the next column as the key
    assert group_ids(2, index=["t", "t"], role=["a", "a"], turn=[0, 1]).tolist() == [0, 1]


@settings(max_examples=100, deadline=None)
@given(
    data=st.lists(
        st.tuples(dyadic, st.integers(0, 4), st.sampled_from("ab"), st.integers(0, 2), st.integers(1, 6)),
        min_size=1,
        max_size=40,
    ),
    norm=st.booleans(),
)
def test_task_grouping_equals_verl_grpo_on_the_same_uid(data, norm):
    rewards, mask = outcome_rewards([d[0] for d in data], [d[4] for d in data], width=6)
    rewards, mask = rewards.double(), mask.double()
    uid = np.array([f"uid{d[1]}" for d in data], dtype=object)
    role, turn = [d[2] for d in data], [d[3] for d in data]
    ours, _ = compute_at_grpo_advantage(rewards, mask, uid, role=role, turn=turn, grouping="task", norm_adv_by_std=norm)
    theirs, _ = compute_grpo_outcome_advantage(rewards, mask, uid, norm_adv_by_std_in_grpo=norm)
    assert torch.allclose(ours, theirs, atol=1e-6, rtol=1e-6)


def test_verl_registry_serves_this_estimator_with_the_grouping_keywords():
    assert get_adv_estimator_fn("at_grpo") is compute_at_grpo_advantage is registered_estimator()
    rewards, mask = outcome_rewards([1.0, 3.0, 5.0, 5.0], [1, 2, 1, 2])
    keys = {"index": ["t"] * 4, "role": ["a", "a", "b", "b"], "turn": [0] * 4}
    adv, _ = registered_estimator()(token_level_rewards=rewards, response_mask=mask, config=None, **keys)
    assert adv[:, 0].tolist() == pytest.approx([-1 / math.sqrt(2), 1 / math.sqrt(2), 0.0, 0.0], abs=1e-5)
    with pytest.raises(TypeError, match="groupng"):  # a misspelt keyword is not swallowed
        registered_estimator()(token_level_rewards=rewards, response_mask=mask, groupng="task", **keys)


def test_an_unregistered_estimator_is_a_clear_error(monkeypatch):
    monkeypatch.delitem(core_algos.ADV_ESTIMATOR_REGISTRY, "at_grpo")
    with pytest.raises(RuntimeError, match="not in verl's estimator registry.*verl_mas.plugin"):
        registered_estimator()


def test_advantages_take_the_rewards_dtype_whatever_the_masks():
    rewards, mask = outcome_rewards([1.0, 2.0], [1, 2])
    for other in (mask.bool(), mask.double(), mask.long()):
        adv, _ = compute_at_grpo_advantage(rewards, other, ["t", "t"])
        assert adv.dtype == torch.float32
        assert adv.tolist() == compute_at_grpo_advantage(rewards, mask, ["t", "t"])[0].tolist()


@example(data=[(4.0, 0, 1), (4.0, 0, 1), (4.125, 0, 1)], norm=True)  # failed in float32: see above
@settings(max_examples=150, deadline=None)
@given(
    data=st.lists(st.tuples(dyadic, st.integers(0, 5), st.integers(1, 6)), min_size=1, max_size=40),
    norm=st.booleans(),
)
def test_equals_verl_grpo_without_role_and_turn(data, norm):
    scores = [d[0] for d in data]
    index = np.array([f"uid{d[1]}" for d in data], dtype=object)
    rewards, mask = outcome_rewards(scores, [d[2] for d in data], width=6)
    rewards, mask = rewards.double(), mask.double()
    ours, _ = compute_at_grpo_advantage(rewards, mask, index, norm_adv_by_std=norm)
    theirs, _ = compute_grpo_outcome_advantage(rewards, mask, index, norm_adv_by_std_in_grpo=norm)
    assert torch.allclose(ours, theirs, atol=1e-6, rtol=1e-6)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(dyadic, st.sampled_from("abc"), st.integers(0, 2)), min_size=2, max_size=30))
def test_every_group_with_spread_has_zero_mean_and_unit_std(data):
    rewards, mask = outcome_rewards([d[0] for d in data], [1] * len(data))
    role = [d[1] for d in data]
    turn = [d[2] for d in data]
    adv, _ = compute_at_grpo_advantage(rewards, mask, ["t"] * len(data), role=role, turn=turn)
    values = adv[:, 0].double()
    for key in set(zip(role, turn, strict=True)):
        members = [i for i, k in enumerate(zip(role, turn, strict=True)) if k == key]
        group_scores = torch.tensor([data[i][0] for i in members], dtype=torch.float64)
        if len(members) > 1 and group_scores.std() > 0:
            assert values[members].mean().item() == pytest.approx(0.0, abs=1e-5)
            assert values[members].std().item() == pytest.approx(1.0, abs=1e-4)


def test_through_verl_compute_advantage_with_composite_uid():
    from verl import DataProto
    from verl.trainer.ppo.ray_trainer import compute_advantage

    rewards, mask = outcome_rewards([1.0, 3.0, 4.0, 8.0], [2, 2, 2, 2])
    uid = np.array(["t0|a|0", "t0|a|0", "t0|b|0", "t0|b|0"], dtype=object)
    batch = DataProto.from_dict(
        tensors={
            "token_level_rewards": rewards,
            "response_mask": mask,
            "responses": torch.zeros(4, 4, dtype=torch.long),
            "reward_baselines": torch.full((4,), 100.0),  # the dispatcher passes them on; the group mean is ours
        },
        non_tensors={"uid": uid},
    )
    config = OmegaConf.create({"norm_adv_by_std_in_grpo": True, "gamma": 1.0, "lam": 1.0})
    out = compute_advantage(batch, adv_estimator="at_grpo", config=config)
    expected, _ = compute_at_grpo_advantage(rewards, mask, uid)
    assert torch.allclose(out.batch["advantages"], expected)
    s = 1 / math.sqrt(2)
    assert out.batch["advantages"][:, 0].tolist() == pytest.approx([-s, s, -s, s], abs=1e-5)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: (torch.zeros(0, 3), torch.zeros(0, 3), []), "empty batch"),
        (lambda: (torch.zeros(2, 3), torch.zeros(2, 4), ["a", "b"]), "response_mask shape"),
        (lambda: (torch.zeros(3, 2), torch.ones(3, 2), ["a", "b"]), "index has 2 entries for a batch of 3"),
        (lambda: (torch.tensor([[float("nan")], [0.0]]), torch.ones(2, 1), ["a", "a"]), "non-finite"),
        (lambda: (torch.tensor([[float("inf")], [0.0]]), torch.ones(2, 1), ["a", "a"]), "rows [0]"),
        (lambda: (torch.zeros(3), torch.zeros(3), ["a"] * 3), "2-D tensor"),
    ],
)
def test_invalid_input_raises_value_error(make, message):
    rewards, mask, index = make()
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        compute_at_grpo_advantage(rewards, mask, index)


@pytest.mark.parametrize("grouping", GROUPINGS)
def test_role_without_turn_is_rejected(grouping):
    with pytest.raises(ValueError, match="both role and turn"):
        compute_at_grpo_advantage(torch.zeros(2, 1), torch.ones(2, 1), ["t", "t"], role=["a", "b"], grouping=grouping)


@pytest.mark.parametrize("grouping", GROUPINGS)
def test_mismatched_role_length_is_named(grouping):
    # checked under "task" too: a batch whose columns disagree is broken whichever key is used
    with pytest.raises(ValueError, match="role has 1 entries"):
        compute_at_grpo_advantage(
            torch.zeros(2, 1), torch.ones(2, 1), ["t", "t"], role=["a"], turn=[0, 0], grouping=grouping
        )


def test_unknown_grouping_is_rejected_with_the_choices():
    choices = r"\['task_role_turn', 'task_role', 'task'\]"
    with pytest.raises(GroupingError, match=rf"^at_grpo grouping: unknown grouping 'turn'; use one of {choices}$"):
        compute_at_grpo_advantage(torch.zeros(2, 1), torch.ones(2, 1), ["t", "t"], grouping="turn")


@pytest.mark.parametrize(
    "hostile",
    ["turn", "", "TASK", " task", "task\n", "task_role_turn,task", None, 0, True, ["task"], ("task",), {"task": 1}],
)
def test_check_grouping_refuses_anything_but_a_grouping_name_naming_the_key(hostile):
    with pytest.raises(
        GroupingError, match=rf"^mas\.grouping: unknown grouping {re.escape(repr(hostile))}; use one of"
    ):
        check_grouping(hostile, "mas.grouping")


@pytest.mark.parametrize("grouping", GROUPINGS)
def test_check_grouping_returns_a_grouping_name_unchanged(grouping):
    assert check_grouping(grouping) == grouping
    assert check_grouping(np.str_(grouping)) == grouping  # a label read from a numpy column is still a name
