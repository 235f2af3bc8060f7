"""Benchmark: does AT-GRPO through verl's real stack on CPU lift held-out success, beside the local engine?

Both engines start from one warm-started tiny model (the embedded default's, with 2 attention heads: vLLM's CPU
attention needs a head size of 32) and train the same boards in the same order with the same settings, one
optimizer step per policy per training step (the paper's on-policy setting): the local engine updates on the whole
batch, and verl's `ppo_mini_batch_size` is the most samples one policy can get in a step (verl pads every batch up
to it with zero-mask rows, so the step's samples form exactly one mini-batch). Both save checkpoints every
`--eval-every` steps; every checkpoint of both engines is then evaluated by one evaluator on the same held-out
boards, greedy and sampled at the training temperature with the same random numbers every time, so before/after
and engine/engine differences are paired per board.

    python -m research.verl_learning --router shared --steps 150 --eval-every 25
    python -m research.verl_learning --router lora_per_role --steps 100   # L2: one base, one LoRA adapter per role
    python -m research.verl_learning --plot     # the chart and table of every router's saved JSON

It writes the whole result to runs/verl_learning/ROUTER.json and the page's data, every board's result at every
checkpoint, every run's curve and the median step times, to OUT/ROUTER.json (`--out`, default
runs/verl_learning/data): copied into research/verl_learning/data/ (L2's, lora_per_role*.json, into
research/lora_learning/data/), `python -m research.figures` recomputes the pages.

`--router lora_per_role` is L2: the local engine's `lora_per_role` preset (router per_role, one frozen base with one
LoRA adapter per role) beside verl's `mas.lora_per_role` with the same rank, alpha, target modules and learning rate.
verl's one checkpoint tree holds the base, verl's own never-active adapter `default` and one adapter per role under
peft's names; without `default` it is the local engine's LoRA model, so both engines' checkpoints are loaded into the
evaluator's peft model the same way.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from research.verl_cpu.verl_cpu import comparison_keys, verl_overrides, write_boards
from verl_mas.cpu_run import CpuRun, run_on_cpu
from verl_mas.env import make_env
from verl_mas.local.config import LocalTrainConfig
from verl_mas.local.export import export_policies
from verl_mas.local.policies import LORA_BASE_MODEL
from verl_mas.local.presets import PRESETS
from verl_mas.local.train import LocalRun, make_tasks, train
from verl_mas.overrides import apply_overrides

ROOT = Path(__file__).resolve().parents[2]
WORK = ROOT / "runs" / "verl_learning"  # models, data, run folders (not kept)
DEFAULT_OUT = WORK / "data"  # the compact records the pages read (research/{verl,lora}_learning/data/)
CHART = Path(__file__).resolve().parent / "data" / "verl_learning.png"
ABOUT = (
    "Held-out readings of each run on the same {boards} evaluation boards at every checkpoint. boards: per engine and "
    "step, one character per board, greedy solved (0/1) and sampled episodes solved of {samples} (0/1/2). curves: "
    "success per step for the two engines' main runs and the local runs that differ only in sampler seed. step_s: "
    "median step time and its phases (s)."
)
PILOT_ABOUT = (
    "The local engine alone, one run per arm (the same seed, boards and warm start), on the same {boards} held-out "
    "boards at every checkpoint: board_results, per arm and step, one character per board, greedy solved (0/1) and "
    "sampled episodes solved of {samples} (0/1/2). step_s: median step time and its phases (s). base_change_max: the "
    "largest base-weight change from the warm start at the last checkpoint."
)
ENGINES = ("local", "verl")
ROUTERS = ("shared", "per_role", "lora_per_role")
LORA_ROUTER = "lora_per_role"  # L2: the local engine's preset of that name, verl's mas.lora_per_role
L2_FIRST_STEPS = 100  # the first two L2 designs' budget: their folders and records carry no steps
VERL_ADAPTER = "default"  # verl's own adapter in a mas.lora_per_role checkpoint: frozen, never active
LOCAL_TIMES = {
    "generation": "time/generation_s",
    "old_log_prob": None,  # recomputed inside the local update
    "advantage": "time/advantage_s",
    "update": "time/update_s",
    "step": "time/step_s",
}
VERL_TIMES = {
    "generation": "timing_s/gen",
    "old_log_prob": "timing_s/old_log_prob",
    "advantage": "timing_s/adv",
    "update": "timing_s/update_actor",
    "step": "timing_s/step",
}


def paired(after: np.ndarray, before: np.ndarray) -> dict[str, float | None]:
    """Mean of the per-board differences `after - before`, its standard error (sd / sqrt(boards)) and their ratio;
    None (JSON null) where one board leaves no se, or no spread leaves no z."""
    difference = np.asarray(after, dtype=float) - np.asarray(before, dtype=float)
    se = float(difference.std(ddof=1) / math.sqrt(len(difference))) if len(difference) > 1 else None
    mean = float(difference.mean())
    return {"mean": mean, "se": se, "z": mean / se if se and math.isfinite(se) else None}


def finite_or_null(value: Any) -> Any:
    """`value` with every float that is not finite (a NaN reading, an infinite ratio) made None: strict JSON, so that
    a result computed over hours is never lost to the writer refusing it."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite_or_null(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [finite_or_null(item) for item in value]
    return value


def or_dash(value: float | None, spec: str) -> str:
    """`value` formatted by `spec`, or "-" for a figure that is not defined (None)."""
    return "-" if value is None else format(value, spec)


def median_times(rows: list[dict], names: dict[str, str | None]) -> dict[str, float | None]:
    """The median of each timing over the steps after the first (None for a phase the engine does not time)."""
    later = rows[1:] or rows
    return {
        phase: statistics.median(row[key] for row in later if key in row) if key and later else None
        for phase, key in names.items()
    }


class LoadSampler:
    """Reads the 1-minute load average every `period` seconds on a thread until stopped."""

    def __init__(self, period: float = 30.0) -> None:
        self.period = period
        self.readings: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> LoadSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while True:
            self.readings.append(os.getloadavg()[0])
            if self._stop.wait(self.period):
                return

    def summary(self) -> dict[str, float | None]:
        values = self.readings
        if not values:  # a run shorter than one period: nothing was read
            return {"min": None, "median": None, "max": None, "readings": 0}
        return {"min": min(values), "median": statistics.median(values), "max": max(values), "readings": len(values)}


def local_config(
    args: argparse.Namespace,
    out: Path,
    lr: float | None = None,
    rank: int | None = None,
    targets: tuple[str, ...] | None = None,
) -> LocalTrainConfig:
    """The local run's config; under L2 the preset's LoRA settings, with `lr`, `rank` and the adapted modules
    (`targets`) in their place where given."""
    keys = {"router": args.router, "checkpoint_every": args.eval_every, "output_dir": str(out)}
    if args.router == LORA_ROUTER:  # the preset's router (per_role) and LoRA settings; its output folder is ours
        keys |= {k: v for k, v in PRESETS[LORA_ROUTER].overrides.items() if k != "output_dir"}
        keys |= {"update": {"lr": lr}} if lr is not None else {}
        lora = ({"rank": rank} if rank is not None else {}) | ({"target_modules": targets} if targets else {})
        keys["lora"] = keys.get("lora", {}) | lora  # over the preset's LoRA keys, not in their place
    return apply_overrides(LocalTrainConfig(), comparison_keys(args) | keys)


def lora_preset() -> LocalTrainConfig:
    """The local `lora_per_role` preset's config: the settings an L2 run's names are told apart from."""
    return apply_overrides(LocalTrainConfig(), PRESETS[LORA_ROUTER].overrides)


def lora_variant(config: LocalTrainConfig) -> str:
    """The suffix of an L2 run's work folder and record: "" at the preset's lr, rank and adapted modules and the first
    L2 budget (the first L2 runs' names), else its lr and rank (`_lr0.001_r16`), its budget (`_steps200`) and its
    modules (`_targets-q_proj-...-down_proj`), so that runs at other settings never reuse or overwrite those: the
    local engine trains afresh into a folder that holds checkpoints, over a shorter run's."""
    if not config.lora.rank:
        return ""
    preset = lora_preset()
    name = ""
    if (config.update.lr, config.lora.rank) != (preset.update.lr, preset.lora.rank):
        name = f"_lr{config.update.lr:g}" + (f"_r{config.lora.rank}" if config.lora.rank != preset.lora.rank else "")
    name += "" if config.steps == L2_FIRST_STEPS else f"_steps{config.steps}"
    return name + targets_variant(config)


def targets_variant(config: LocalTrainConfig) -> str:
    """`_targets-<module>-...` when an L2 run adapts other modules than the preset's, else ""."""
    modules = config.lora.target_modules
    return (
        "" if not config.lora.rank or modules == lora_preset().lora.target_modules else "_targets-" + "-".join(modules)
    )


def pilot_record_name(router: str, seed: int, steps: int, targets: str = "") -> str:
    """An L2 pilot's record: ROUTER_pilot_seedS.json at the first L2 budget (the second design's pilot), else with
    `_stepsN`, and with its `targets_variant`, so that a pilot at another budget or on other modules never overwrites
    it."""
    return f"{router}_pilot_seed{seed}" + ("" if steps == L2_FIRST_STEPS else f"_steps{steps}") + targets + ".json"


def samples_per_policy(config: LocalTrainConfig) -> int:
    """The most samples one policy can get in a training step: K per task, turn and role it serves."""
    workflow = make_env(config.env, **config.env_options).workflow()
    roles_per_policy = len(workflow.roles) if config.router == "shared" else 1
    return config.tasks_per_step * config.k * workflow.max_turns * roles_per_policy


def with_keys(overrides: list[str], extra: dict[str, object]) -> list[str]:
    """`overrides` with the keys in `extra` set to its values (replaced where present, appended where not)."""
    kept = [o for o in overrides if o.split("=", 1)[0] not in extra]
    return kept + [f"{key}={value}" for key, value in extra.items()]


def verl_command(config: LocalTrainConfig, args: argparse.Namespace, model: Path, data: Path, out: Path) -> list[str]:
    base = verl_overrides(config, model, data, out)
    extra: dict[str, object] = {
        "actor_rollout_ref.actor.ppo_mini_batch_size": samples_per_policy(config),
        "data.shuffle": "false",  # the local engine's board order
        "trainer.save_freq": args.eval_every,
    }
    # verl's FSDP engine computes in bf16 unless told otherwise, while the CPU profile's vLLM samples in float32:
    # float32 here, as the local engine and the sampler, so that the actor's log-probs are the sampler's
    precision = "++actor_rollout_ref.actor.fsdp_config.mixed_precision"  # ++: whether or not the profile sets it
    extra |= {f"{precision}.{kind}_dtype": "fp32" for kind in ("param", "reduce", "buffer")}
    if config.lora.rank:  # L2: every role an adapter of the one base, in one worker group on one device
        extra |= {
            "mas.lora_per_role": "true",
            "actor_rollout_ref.model.lora_rank": config.lora.rank,
            "actor_rollout_ref.model.lora_alpha": int(config.lora.alpha),  # verl's field is an int
            "actor_rollout_ref.model.target_modules": f"[{','.join(config.lora.target_modules)}]",
        }
    elif config.router == "per_role":
        extra |= {"trainer.n_gpus_per_node": 2, "ray_kwargs.ray_init.num_gpus": 2}
    return with_keys(base, extra)


def local_checkpoints(folder: Path) -> dict[int, dict[str, dict]]:
    """{step: {policy: state dict}} of a local run's checkpoints."""
    found = {}
    for step_dir in sorted(folder.glob("step_*")):
        meta = json.loads((step_dir / "meta.json").read_text())
        found[meta["step"]] = {p: torch.load(step_dir / f"model_{p}.pt", map_location="cpu") for p in meta["models"]}
    return found


def lora_owner(name: str) -> str | None:
    """The adapter a peft weight name belongs to (`...lora_A.<adapter>.weight`), None for a base weight."""
    parts = name.split(".")
    return next((parts[i + 1] for i, part in enumerate(parts[:-1]) if part in ("lora_A", "lora_B")), None)


def role_adapters_state(state: dict[str, torch.Tensor], adapters: list[str]) -> dict[str, torch.Tensor]:
    """A verl `mas.lora_per_role` checkpoint's weights as the local engine's LoRA model holds them: the base and each
    role's adapter under the same peft names, verl's own adapter (`default`, never active) left out. Raises when an
    adapter of `adapters` is missing or the checkpoint holds one the local model does not."""
    found = {lora_owner(name) for name in state} - {None, VERL_ADAPTER}
    if found != set(adapters):
        raise ValueError(f"the checkpoint holds adapters {sorted(found)}, the local model {sorted(adapters)}")
    return {name: tensor for name, tensor in state.items() if lora_owner(name) != VERL_ADAPTER}


def base_change(state: dict[str, torch.Tensor], start: dict[str, torch.Tensor]) -> float:
    """The largest |weight - start| over the base weights (every weight no adapter owns) both hold."""
    names = [name for name in state if lora_owner(name) is None and name in start]
    return max(float((state[name] - start[name]).abs().max()) for name in names)


def verl_checkpoints(folder: Path, policies: list[str]) -> dict[int, dict[str, dict]]:
    """{step: {policy: state dict}} of a verl run's FSDP2 checkpoints (world size 1: each shard is the tensor)."""
    roots = {p: folder if len(policies) == 1 else folder / p for p in policies}
    steps = sorted(int(d.name.split("_")[-1]) for d in roots[policies[0]].glob("global_step_*"))
    found = {}
    for step in steps:
        found[step] = {}
        for policy, root in roots.items():
            shard = root / f"global_step_{step}" / "actor" / "model_world_size_1_rank_0.pt"
            state = torch.load(shard, map_location="cpu", weights_only=False)
            found[step][policy] = {k: (t.to_local() if hasattr(t, "to_local") else t) for k, t in state.items()}
    return found


class Evaluator:
    """Held-out success per board of any weights: greedy (K = 1) and `samples` episodes sampled at the training
    temperature, with the same random numbers at every call."""

    def __init__(self, config: LocalTrainConfig, samples: int) -> None:
        self.run = LocalRun(config, log=lambda _: None)
        self.tasks = make_tasks(config, "eval", 0, config.eval_tasks)
        self.samples = samples

    def __call__(self, weights: dict[str, dict]) -> dict[str, list[float]]:
        for policy, state in weights.items():
            self.run.models[policy].load_state_dict(state)
        greedy = self.run.rollout(self.tasks, self.run.evaluator, 1, "tree")
        self.run.sampled_evaluator.set_rng_state(self.run.sampled_evaluator_start)
        sampled = self.run.rollout(self.tasks, self.run.sampled_evaluator, self.samples, "independent")
        solved = np.array([r.success for r in sampled], dtype=float).reshape(len(self.tasks), self.samples)
        return {"greedy": [float(r.success) for r in greedy], "sampled": solved.mean(axis=1).tolist()}


def curve(boards: dict[int, dict[str, list[float]]]) -> dict[str, dict]:
    """Per evaluation mode: each step's mean and its paired change from step 0 (mean, se, z)."""
    steps = sorted(boards)
    out = {}
    for mode in ("greedy", "sampled"):
        start = np.array(boards[0][mode])
        out[mode] = {
            "steps": steps,
            "success": [float(np.mean(boards[s][mode])) for s in steps],
            "change": [paired(np.array(boards[s][mode]), start) for s in steps],
        }
    return out


def training_spread(boards: dict[str, dict[int, dict]], spread: dict[int, dict[int, dict]]) -> dict[str, list[dict]]:
    """Per mode and checkpoint: the held-out success of every local run (the main one and each sampler seed's, which
    differ in their training samples only), their mean and sd, verl's reading, and how many local sds it lies from
    their mean: the spread two training runs of one engine show, to read the engines' difference against."""
    runs = [boards["local"], *spread.values()]
    out = {}
    for mode in ("greedy", "sampled"):
        rows = []
        for step in sorted(set(boards["verl"]).intersection(*runs)):
            local = [float(np.mean(run[step][mode])) for run in runs]
            verl = float(np.mean(boards["verl"][step][mode]))
            sd = float(np.std(local, ddof=1)) if len(local) > 1 else None
            mean = float(np.mean(local))
            rows.append(
                {
                    "step": step,
                    "local": local,
                    "local_mean": mean,
                    "local_sd": sd,
                    "verl": verl,
                    "verl_in_local_sds": (verl - mean) / sd if sd else None,
                }
            )
        out[mode] = rows
    return out


def run_local(config: LocalTrainConfig, model: Path) -> dict:
    started = time.monotonic()
    with LoadSampler() as load:
        summary = train(apply_overrides(config, {"model": {"path": str(model)}}), log=lambda _: None)
    rows = [row for row in summary.history if "time/step_s" in row]
    return {
        "wall_s": time.monotonic() - started,
        "load_average": load.summary(),
        "times": median_times(rows, LOCAL_TIMES),
        "greedy_before_after": [summary.eval_success_before, summary.eval_success_after],
    }


def saved_step(checkpoints: Path) -> int:
    """The last step every policy of a verl run has checkpointed under `checkpoints` (0: none)."""
    markers = list(checkpoints.glob("**/latest_checkpointed_iteration.txt"))
    return min((int(m.read_text().strip() or 0) for m in markers), default=0)


def run_verl(overrides: list[str], out: Path, timeout: float, stop_at: int | None) -> dict:
    """verl's run; one stopped by `timeout`, or once every policy has saved step `stop_at`, counts as partial:
    its checkpoints so far are evaluated."""
    started = time.monotonic()
    stop = (lambda: saved_step(out / "checkpoints") >= stop_at) if stop_at else None
    with LoadSampler() as load:
        try:
            run = run_on_cpu(out, overrides, timeout, kill_when=stop, audit=True)
        except TimeoutError:
            run = CpuRun(out, None, time.monotonic() - started)
    if run.returncode not in (0, None):
        raise SystemExit(f"the verl run failed ({run.returncode}); see {run.folder / 'log.txt'}")
    return verl_summary(run) | {"load_average": load.summary()}


def verl_summary(run: CpuRun) -> dict:
    """What a verl run's folder says: steps done, median phase times, its own validations, the rows each update
    received (padding included), the sampler-vs-actor probability gap."""
    logged = run.metrics()
    steps = [row["data"] for row in logged if "timing_s/step" in row["data"]]
    validation = {
        row["step"]: value
        for row in logged
        for key, value in row["data"].items()
        if key.startswith("val-core/") and "/acc/" in key
    }
    rows_per_update = sorted({len(record["rows"]) for record in run.audit()})
    # one gap per step and policy: verl logs it unprefixed for one policy, as policy/<id>/training/... for several
    probs_gap = [
        value for row in steps for key, value in row.items() if key.endswith("training/rollout_probs_diff_max")
    ]
    guard_gap: dict[str, float] = {}  # the on-policy guard's measure per role (mas/<role>/logprob_gap), its largest
    for row in steps:
        for key, value in row.items():
            parts = key.split("/")
            if len(parts) == 3 and parts[0] == "mas" and parts[2] == "logprob_gap":
                guard_gap[parts[1]] = max(guard_gap.get(parts[1], value), value)
    return {
        "wall_s": run.wall_s,
        "stopped_early": run.returncode is None,
        "steps_done": max((row["step"] for row in logged if "timing_s/step" in row["data"]), default=0),
        "times": median_times(steps, VERL_TIMES),
        "own_greedy_validation": validation,
        "rows_per_update": rows_per_update,
        "rollout_probs_diff_max": [min(probs_gap), max(probs_gap)] if probs_gap else None,
        "logprob_gap_max": guard_gap,
    }


def cached(path: Path, compute: Callable[[], dict], reuse: bool) -> dict:
    """`compute()`, saved to `path`; with `reuse`, what `path` holds already (a run trained earlier)."""
    if reuse and path.exists():
        return json.loads(path.read_text())
    value = compute()
    path.write_text(json.dumps(finite_or_null(value), indent=1, allow_nan=False))
    return value


def seed_work(seed: int) -> Path:
    """The seed's work folder: its warm start is its own (seed 0's runs kept the folder's first layout)."""
    return WORK if seed == 0 else WORK / f"seed_{seed}"


def record_name(router: str, seed: int) -> str:
    """The compact record's file name: ROUTER.json for seed 0, ROUTER_seedS.json for the replication seeds."""
    return f"{router}.json" if seed == 0 else f"{router}_seed{seed}.json"


def warm_start(args: argparse.Namespace, root: Path) -> Path:
    """The seed's warm start, every router's and every L2 regime's one: a whole shared model, exported once."""
    model = root / "model"
    if not model.exists():
        whole = {"router": "shared", "lora": {"rank": 0}}
        export_policies(apply_overrides(local_config(args, root / "warm_start"), whole), model)
    return model


def train_and_evaluate(args: argparse.Namespace) -> Path | None:
    torch.set_num_threads(args.threads)
    root = seed_work(args.seed)
    config = local_config(args, Path(), args.lora_lr[0] if args.lora_lr else None, args.lora_rank, args.lora_targets)
    name = args.router + lora_variant(config)
    work = root / name
    config = apply_overrides(config, {"output_dir": str(work / "local")})
    model = warm_start(args, root)
    write_boards(config, work / "data")
    overrides = verl_command(config, args, model, work / "data", work / "verl")
    runs = {
        "local": lambda: run_local(config, model),
        "verl": lambda: run_verl(overrides, work / "verl", args.timeout, args.stop_at),
    }
    if args.verl_stopped:  # the verl run in the work folder was stopped by hand: summarise what it left
        runs["verl"] = lambda: verl_summary(CpuRun(work / "verl", None, None)) | {"load_average": None}
    engines = {engine: cached(work / f"{engine}.json", runs[engine], args.reuse) for engine in args.engines}
    if args.engines != ENGINES:  # one engine's run, kept in the work folder for a later --reuse
        return None
    spread_runs = {seed: work / f"local_sampler{seed}" for seed in args.local_sampler_seeds}
    for seed, folder in spread_runs.items():  # the same boards and warm start, other samples
        spread_config = apply_overrides(config, {"sampler_seed": seed, "output_dir": str(folder)})
        cached(folder.with_suffix(".json"), lambda c=spread_config: run_local(c, model), args.reuse)
    evaluate = Evaluator(apply_overrides(config, {"model": {"path": str(model)}}), args.eval_samples)
    policies = list(evaluate.run.models)
    checkpoints = {
        "local": local_checkpoints(work / "local" / "checkpoints"),
        "verl": verl_checkpoints(work / "verl" / "checkpoints", policies),
    }
    start = {p: {k: v.clone() for k, v in m.state_dict().items()} for p, m in evaluate.run.models.items()}
    if config.lora.rank:  # verl's tree as the local LoRA model holds it; both engines' bases must not have moved
        adapters = list(evaluate.run.trainers)
        for found in checkpoints["verl"].values():
            found[LORA_BASE_MODEL] = role_adapters_state(found[LORA_BASE_MODEL], adapters)
        for engine, found in checkpoints.items():
            last = found[max(found)][LORA_BASE_MODEL]
            engines[engine]["base_change_max"] = base_change(last, start[LORA_BASE_MODEL])
    warm = evaluate(start)
    boards = {engine: {0: warm} for engine in ENGINES}
    for engine, found in checkpoints.items():
        for step, weights in found.items():
            boards[engine][step] = evaluate(weights)
    spread = {seed: {0: warm} for seed in spread_runs}
    for seed, folder in spread_runs.items():
        for step, weights in local_checkpoints(folder / "checkpoints").items():
            spread[seed][step] = evaluate(weights)
    result = {
        "date": datetime.date.today().isoformat(),
        "command": "python -m research.verl_learning "
        + " ".join(
            f"--{k.replace('_', '-')} {v}"
            for k, v in vars(args).items()
            if k
            not in (
                "plot",
                "reuse",
                "engines",
                "verl_stopped",
                "local_sampler_seeds",
                "local_only",
                "lora_lr",
                "lora_targets",
            )
            and v is not None
        )
        + (f" --lora-lr {args.lora_lr[0]:g}" if args.lora_lr else "")
        + (f" --lora-targets {' '.join(args.lora_targets)}" if args.lora_targets else "")
        + (f" --local-sampler-seeds {' '.join(map(str, spread_runs))}" if spread_runs else ""),
        "router": args.router,
        "seed": args.seed,
        "boards": args.eval_tasks,
        "sampled_episodes_per_board": args.eval_samples,
        "local_torch_threads": args.threads,
        "verl_ppo_mini_batch_size": samples_per_policy(config),
        "verl_overrides": overrides,
        "engines": {engine: engines[engine] | {"curve": curve(boards[engine])} for engine in ENGINES},
        "verl_minus_local": {
            mode: {
                step: paired(np.array(boards["verl"][step][mode]), np.array(boards["local"][step][mode]))
                for step in sorted(set(boards["verl"]) & set(boards["local"]))
            }
            for mode in ("greedy", "sampled")
        },
        "local_sampler_runs": {str(seed): curve(found) for seed, found in spread.items()},
        "training_spread": training_spread(boards, spread),
        "boards_per_step": boards,
    }
    path = root / record_name(name, args.seed)
    path.write_text(json.dumps(finite_or_null(result), indent=1, allow_nan=False))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / path.name).write_text(json.dumps(finite_or_null(compact_record(result)), indent=1, allow_nan=False))
    return path


def compact_record(result: dict[str, Any]) -> dict[str, Any]:
    """What the page's figures read from a whole result: every board's reading at every checkpoint of both engines as
    one character a board (greedy 0/1, sampled the episodes solved), every run's curve, the median step times."""
    samples = result["sampled_episodes_per_board"]
    scale = {"greedy": 1, "sampled": samples}
    curves = {engine: result["engines"][engine]["curve"] for engine in ENGINES}
    curves |= {f"local, sampler seed {seed}": curve for seed, curve in result["local_sampler_runs"].items()}
    return {
        "about": ABOUT.format(boards=result["boards"], samples=samples),
        **{key: result[key] for key in ("date", "command", "router", "seed", "boards", "sampled_episodes_per_board")},
        "steps": curves["local"]["greedy"]["steps"],
        "board_results": {
            engine: board_strings(by_step, samples) for engine, by_step in result["boards_per_step"].items()
        },
        "curves": {name: {mode: curve[mode]["success"] for mode in scale} for name, curve in curves.items()},
        "step_s": {engine: result["engines"][engine]["times"] for engine in ENGINES},
        **({"validity": validity} if (validity := lora_validity(result)) else {}),
    }


def board_strings(by_step: dict[int, dict[str, list[float]]], samples: int) -> dict[int, dict[str, str]]:
    """Each step's readings as one character a board: greedy solved (0/1), sampled the episodes solved (0..samples)."""
    scale = {"greedy": 1, "sampled": samples}
    return {
        step: {mode: "".join(str(round(v * scale[mode])) for v in reading[mode]) for mode in scale}
        for step, reading in by_step.items()
    }


def local_pilot(args: argparse.Namespace) -> Path:
    """The local engine alone, one run per `--lora-lr` (the same seed, boards and warm start), every checkpoint read by
    the evaluator: which L2 regime learns, before verl's time is spent on one. Writes
    OUT/ROUTER_pilot_seedS[_stepsN].json after every arm, so that an arm cut short loses only itself."""
    torch.set_num_threads(args.threads)
    root = seed_work(args.seed)
    model = warm_start(args, root)
    record: dict[str, Any] = {
        "about": PILOT_ABOUT.format(boards=args.eval_tasks, samples=args.eval_samples),
        "date": datetime.date.today().isoformat(),
        "command": "python -m research.verl_learning --local-only "
        f"--router {args.router} --steps {args.steps} --eval-every {args.eval_every} --seed {args.seed}"
        + (f" --lora-lr {' '.join(f'{lr:g}' for lr in args.lora_lr)}" if args.lora_lr else "")
        + (f" --lora-rank {args.lora_rank}" if args.lora_rank else "")
        + (f" --lora-targets {' '.join(args.lora_targets)}" if args.lora_targets else ""),
        **{key: getattr(args, key) for key in ("router", "seed", "steps")},
        "boards": args.eval_tasks,
        "sampled_episodes_per_board": args.eval_samples,
        "arms": {},
    }
    evaluate = None
    for lr in args.lora_lr or [None]:
        config = local_config(args, Path(), lr, args.lora_rank, args.lora_targets)
        work = root / (args.router + lora_variant(config))
        config = apply_overrides(config, {"output_dir": str(work / "local")})
        work.mkdir(parents=True, exist_ok=True)
        run = cached(work / "local.json", lambda c=config: run_local(c, model), args.reuse)
        if evaluate is None:  # the arms differ in lr only: one evaluator, one reading of the warm start
            evaluate = Evaluator(apply_overrides(config, {"model": {"path": str(model)}}), args.eval_samples)
            start = {p: {k: v.clone() for k, v in m.state_dict().items()} for p, m in evaluate.run.models.items()}
            warm = evaluate(start)
        found = local_checkpoints(work / "local" / "checkpoints")
        boards = {0: warm} | {step: evaluate(weights) for step, weights in found.items()}
        arm = {"lr": config.update.lr, "rank": config.lora.rank, "alpha": config.lora.alpha, "wall_s": run["wall_s"]}
        arm["target_modules"] = list(config.lora.target_modules)
        arm |= {"step_s": run["times"], "board_results": board_strings(boards, args.eval_samples)}
        if config.lora.rank:
            arm["base_change_max"] = base_change(found[max(found)][LORA_BASE_MODEL], start[LORA_BASE_MODEL])
        record["arms"][f"lr {config.update.lr:g}, rank {config.lora.rank}"] = arm
        args.out.mkdir(parents=True, exist_ok=True)
        path = args.out / pilot_record_name(args.router, args.seed, args.steps, targets_variant(config))
        path.write_text(json.dumps(finite_or_null(record), indent=1, allow_nan=False))
        for mode in ("sampled", "greedy"):
            c = paired(np.array(boards[max(boards)][mode]), np.array(warm[mode]))
            print(
                f"{args.router} lr {config.update.lr:g} rank {config.lora.rank} step {max(boards)} {mode} change "
                f"{c['mean']:+.3f} ± {or_dash(c['se'], '.3f')} ({or_dash(c['z'], '+.1f')} SE)",
                flush=True,
            )
    return path


def lora_validity(result: dict[str, Any]) -> dict[str, Any] | None:
    """An L2 result's checks, None for the other routers: each engine's largest base-weight change from the warm start
    at its last checkpoint, and verl's largest sampler-vs-actor gaps (the guard's per role, verl's own)."""
    engines = result["engines"]
    if "base_change_max" not in engines["local"]:
        return None
    verl = engines["verl"]
    return {
        "base_change_max": {engine: engines[engine]["base_change_max"] for engine in ENGINES},
        "logprob_gap_max": verl["logprob_gap_max"],
        "rollout_probs_diff_max": verl["rollout_probs_diff_max"],
    }


def print_report(path: Path) -> None:
    result = json.loads(path.read_text())
    print(f"router {result['router']}: held-out success on {result['boards']} boards, seed {result['seed']}")
    for mode in ("sampled", "greedy"):
        for engine in ENGINES:
            c = result["engines"][engine]["curve"][mode]
            readings = "  ".join(f"{s}:{v:.3f}" for s, v in zip(c["steps"], c["success"], strict=True))
            last = c["change"][-1]
            change = f"change {last['mean']:+.3f} ± {or_dash(last['se'], '.3f')} ({or_dash(last['z'], '+.1f')} SE)"
            print(f"  {mode:7} {engine:5} {readings}   {change}")
        gaps = result["verl_minus_local"][mode]
        gap_text = "  ".join(f"{s}:{d['mean']:+.3f}±{or_dash(d['se'], '.3f')}" for s, d in gaps.items())
        print(f"  {mode:7} verl - local: {gap_text}")
    for mode, rows in result.get("training_spread", {}).items():
        if rows and len(rows[0]["local"]) > 1:
            shown = "  ".join(
                f"{r['step']}:{r['local_mean']:.3f}±{or_dash(r['local_sd'], '.3f')}"
                f"/{or_dash(r['verl_in_local_sds'], '+.1f')}"
                for r in rows
            )
            print(f"  {mode:7} local runs mean±sd / verl in local sds: {shown}")
    for engine in ENGINES:
        times = result["engines"][engine]["times"]
        shown = ", ".join(f"{k} {'-' if v is None else f'{v:.2f}'}" for k, v in times.items())
        load = result["engines"][engine]["load_average"]
        read = load and load["readings"]
        seen = f"load average {load['min']:.1f}-{load['max']:.1f} (median {load['median']:.1f})" if read else ""
        wall = or_dash(result["engines"][engine]["wall_s"], ".0f")
        print(f"  {engine} median step times (s): {shown}; wall {wall} s {seen}")


def plot(paths: list[Path]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(paths), figsize=(5.5 * len(paths), 4), squeeze=False)
    for axis, path in zip(axes[0], paths, strict=True):
        result = json.loads(path.read_text())
        for engine, color in zip(ENGINES, ("tab:blue", "tab:orange"), strict=True):
            for mode, style in (("sampled", "-"), ("greedy", "--")):
                c = result["engines"][engine]["curve"][mode]
                start = c["success"][0]
                errors = [(d["se"] or 0.0) if s else 0.0 for s, d in zip(c["steps"], c["change"], strict=True)]
                axis.errorbar(
                    c["steps"],
                    c["success"],
                    yerr=errors,
                    color=color,
                    linestyle=style,
                    marker="o",
                    markersize=3,
                    capsize=2,
                    label=f"{engine}, {mode}",
                )
                axis.axhline(start, color="grey", linewidth=0.5)
        for seed, runs in result.get("local_sampler_runs", {}).items():  # the spread of local training runs
            for mode, style in (("sampled", "-"), ("greedy", "--")):
                c = runs[mode]
                label = (
                    "local, other sampler seeds"
                    if mode == "sampled" and seed == min(result["local_sampler_runs"])
                    else None
                )
                axis.plot(
                    c["steps"], c["success"], color="tab:blue", alpha=0.3, linewidth=0.8, linestyle=style, label=label
                )
        axis.set_title(f"router={result['router']} ({result['boards']} boards, seed {result['seed']})")
        axis.set_xlabel("AT-GRPO step")
        axis.set_ylabel("held-out success")
        axis.legend(fontsize=7)
    figure.suptitle("verl on CPU vs local engine (error bars: paired SE of the change from step 0)", fontsize=9)
    figure.tight_layout()
    figure.savefig(CHART, dpi=110)
    print(f"chart written to {CHART}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m research.verl_learning",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--router", choices=ROUTERS, default="shared", help="lora_per_role: L2 (one base, adapters)")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--eval-every", type=int, default=25)
    parser.add_argument("--tasks-per-step", type=int, default=16)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--eval-tasks", type=int, default=256)
    parser.add_argument("--eval-samples", type=int, default=2, help="sampled episodes per held-out board")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the local engine and evaluator")
    parser.add_argument("--timeout", type=float, default=4 * 3600, help="seconds; verl's run stops there (partial)")
    parser.add_argument("--engines", nargs="+", choices=ENGINES, default=ENGINES, help="train only these")
    parser.add_argument("--stop-at", type=int, help="stop verl's run once it has saved this step (partial)")
    parser.add_argument("--verl-stopped", action="store_true", help="summarise the verl run stopped in the work folder")
    parser.add_argument(
        "--local-sampler-seeds",
        nargs="*",
        type=int,
        default=[],
        help="also train the local engine with these sampler seeds (same boards and warm start) and evaluate them: "
        "the spread of training runs",
    )
    parser.add_argument(
        "--lora-lr",
        nargs="+",
        type=float,
        help="L2: the adapters' lr instead of the preset's (several only with --local-only: one arm each)",
    )
    parser.add_argument("--lora-rank", type=int, help="L2: the adapters' rank instead of the preset's")
    parser.add_argument(
        "--lora-targets",
        nargs="+",
        help="L2: the modules the adapters wrap instead of the preset's (q_proj k_proj v_proj o_proj)",
    )
    parser.add_argument(
        "--local-only",
        action="store_true",
        help="a pilot: the local engine alone, one run per --lora-lr, into OUT/ROUTER_pilot_seedS[_stepsN].json",
    )
    parser.add_argument("--reuse", action="store_true", help="take finished engine runs from the work folder")
    parser.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        help="folder of the page's data: ROUTER.json (seed 0), ROUTER_seedS.json (default: %(default)s)",
    )
    parser.add_argument("--plot", action="store_true", help="only report and chart the saved results")
    args = parser.parse_args(argv)
    if args.plot:
        paths = [path for path in (WORK / f"{router}.json" for router in ROUTERS) if path.exists()]
        for path in paths:
            print_report(path)
        plot(paths)
        return
    args.engines = tuple(args.engines)
    if (args.lora_lr or args.lora_rank or args.lora_targets) and args.router != LORA_ROUTER:
        parser.error(f"--lora-lr, --lora-rank and --lora-targets set L2's adapters: --router {LORA_ROUTER}")
    if args.lora_targets:
        args.lora_targets = tuple(args.lora_targets)
    if args.lora_lr and len(args.lora_lr) > 1 and not args.local_only:
        parser.error("several --lora-lr values are a pilot's arms: with --local-only")
    if args.local_only:
        local_pilot(args)
        return
    if args.seed in args.local_sampler_seeds:
        parser.error(f"--local-sampler-seeds {args.seed}: the main local run already samples with --seed {args.seed}")
    path = train_and_evaluate(args)
    if path is not None:
        print_report(path)


if __name__ == "__main__":
    main()
