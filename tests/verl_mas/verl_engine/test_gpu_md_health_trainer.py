"""docs/gpu.md's subclass of verl's sync trainer, run as written: after verl's own GRPO advantage step on verl's real
TransferQueue, it logs the group health of the step's real rows (padding rows left out) and warns of a uid whose
samples answered different prompts."""

from __future__ import annotations

import logging
import re
import types
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from transfer_queue import KVBatchMeta
from verl.trainer.ppo.v1 import get_trainer_cls
from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY
from verl.utils.tensordict_utils import list_of_dict_to_tensordict

REPO = Path(__file__).resolve().parents[3]
HEADING = "### Group health in verl's own trainer"
MODE = "sync_group_health"


def documented_block() -> str:
    """The first python block under the heading in docs/gpu.md."""
    section = (REPO / "docs" / "gpu.md").read_text().split(HEADING, 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)


@pytest.fixture(scope="module")
def trainer_class():
    TRAINER_REGISTRY.pop(MODE, None)  # the block registers its name once per process
    module = types.ModuleType("group_health_trainer")
    exec(compile(documented_block(), "docs/gpu.md", "exec"), module.__dict__)
    yield get_trainer_cls(MODE)
    TRAINER_REGISTRY.pop(MODE, None)


def row(uid: str, prompt: list[int], reward: float) -> dict:
    return {
        "uid": uid,
        "prompts": torch.tensor(prompt),
        "response_mask": torch.ones(3, dtype=torch.int64),
        "rm_scores": torch.tensor([0.0, 0.0, reward]),
    }


def test_the_documented_trainer_logs_group_health_after_verls_advantage_step(transfer_queue, trainer_class, caplog):
    rows = {  # verl's keys: {uid}_{session}_{index}
        "A_0_0": row("A", [5, 6, 7], 1.0),
        "A_1_0": row("A", [5, 6, 7], 0.0),
        "B_0_0": row("B", [8, 9], 1.0),
        "B_1_0": row("B", [8, 9, 4], 1.0),  # another prompt under the same uid: a mixed group, no reward spread
        "A_2_0": row("A", [5, 6, 7], 1.0),  # verl's padding copy of a row: in no health group
    }
    stored = transfer_queue.kv_batch_put(
        keys=list(rows), partition_id="health", fields=list_of_dict_to_tensordict(list(rows.values()))
    )
    batch = KVBatchMeta(
        keys=stored.keys,
        tags=[{"is_padding": key == "A_2_0"} for key in stored.keys],
        partition_id=stored.partition_id,
        fields=stored.fields,
    )
    trainer = trainer_class.__new__(trainer_class)  # the advantage step only: no workers, no servers
    trainer.config = OmegaConf.create(
        {
            "algorithm": {"adv_estimator": "grpo", "gamma": 1.0, "lam": 1.0, "use_kl_in_reward": False},
            "actor_rollout_ref": {"rollout": {"n": 2}},
        }
    )
    trainer.global_steps = 3
    metrics: dict = {}
    with caplog.at_level(logging.WARNING, logger="verl_mas.group_health"):
        trainer._compute_advantage(batch, metrics)
    # two uid groups of two real rows; B's rewards are equal; one of the two groups mixes prompts
    assert metrics["group_health/groups"] == 2.0 and metrics["group_health/samples"] == 4.0
    assert metrics["group_health/zero_variance_share"] == 0.5
    assert metrics["group_health/mixed_prompt_share"] == 0.5
    assert metrics["group_health/singleton_share"] == 0.0
    warned = [r.getMessage() for r in caplog.records if r.name == "verl_mas.group_health"]
    assert len(warned) == 1 and "step 3" in warned[0], warned
    # verl's GRPO advantages were written for every row, as without the subclass
    fetched = transfer_queue.kv_batch_get(keys=batch.keys, partition_id="health", select_fields=["advantages"])
    advantages = [float(a[0]) for a in fetched["advantages"].unbind()]
    assert advantages[0] > 0 > advantages[1] and advantages[2] == advantages[3] == 0.0
