"""The second design's verl arms: per router one run of verl's CPU stack on the study's task, read by the local
evaluator, recorded in DIR/runs.jsonl.

    python -m research.smollm2_math.verl_runs --router shared|per_role [--seed 0] [--out DIR] [--timeout S]

Rerun after a stop: verl resumes from its last checkpoint (every 10 steps), each launch's log and metrics kept; a
finished run is not launched again, a recorded arm not run again. --steps, --save-every, --stop-at: probes only.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from research.smollm2_learning.learning import finished
from research.smollm2_math import study
from research.smollm2_regime.regime import LOW_TEMPERATURE, sampled_success
from research.verl_cpu.verl_cpu import write_boards
from research.verl_learning.engines import saved_step, verl_summary
from research.verl_learning.settings import verl_command, with_keys
from research.verl_learning.weights import verl_checkpoints
from verl_mas.cpu_run import LOG_FILE, METRICS_FILE, CpuRun, run_on_cpu
from verl_mas.env import make_env
from verl_mas.local.callbacks import RunCallbacks
from verl_mas.local.config import LocalTrainConfig
from verl_mas.local.presets import resolve_train_config
from verl_mas.local.train import LocalRun, make_tasks
from verl_mas.overrides import parse_overrides
from verl_mas.rollout import EpisodeResult
from verl_mas.router import PolicyRouter

ROUTERS = tuple(study.VERL_ARMS)
ARMS, TWINS = study.VERL_ARMS, study.VERL_TWINS
SAVE_EVERY = 10  # the design's checkpoints
KEEP_CHECKPOINTS = 2  # per policy: the last one is read, the one before it is a spare (each ~1.6 GB with Adam)
DEFAULT_TIMEOUT_S = 6 * 3600
# verl's length caps and micro-batch budget. Prompts are 53-78 tokens at the first turn (with the worked example) and
# could reach about 700 at the second (each teammate's answer is shown up to 300 characters); in verl's first steps on
# this task a sample held 74 tokens on average (prompt 58, reply 16): 80 a sample makes a micro-batch of about the
# local update's 16 samples.
PROMPT_TOKENS = 1000  # data.max_prompt_length: no prompt is cut
SAMPLE_TOKENS = 80
LAUNCHES_FILE = "launches.jsonl"  # one line per launch: the step it resumed from, then how it ended
EARLIER = "earlier_launches"  # each earlier launch's log and metrics, moved aside before the next launch
TRAIN_ROW_KEY = "timing_s/step"  # verl logs it in every training step's row, in no other


def local_overrides(seed: int, router: str, steps: int | None = None) -> list[str]:
    """The local twin's overrides (study.learning_overrides), with `steps` in place of the design's 40 for a probe."""
    overrides = study.learning_overrides(seed, TWINS[router])
    return overrides if steps is None else [*overrides, f"steps={steps}"]


def local_config(overrides: list[str], output_dir: Path) -> LocalTrainConfig:
    return resolve_train_config(parse_overrides([*overrides, f"output_dir={output_dir}"]))


def write_data(config: LocalTrainConfig, folder: Path) -> dict[str, Path]:
    """verl's data files in folder/data: the local run's training problems in the order it trains on them (verl reads
    them in order: `data.shuffle=false`), and its evaluation problems; returns {split: file}."""
    write_boards(config, folder / "data")
    return {split: folder / "data" / f"{split}.parquet" for split in ("train", "eval")}


def verl_overrides(config: LocalTrainConfig, folder: Path, save_every: int = SAVE_EVERY) -> list[str]:
    """verl's keys for `config` (the local twin's): research.verl_learning's translation (model, data, env options,
    router, K, alpha, grouping, tasks a step, token limit, temperature, optimizer, one mini-batch holding every sample
    a policy can get, the data in order, the actor in float32, per_role's two worker groups), plus the keys this design
    sets beyond it: the turn cap, no KL, the length caps, the local micro-batch in tokens, gradient checkpointing
    (memory only), the sampler's truncation, checkpoints every `save_every` steps (the last two kept) and resuming
    from the latest."""
    base = verl_command(config, argparse.Namespace(eval_every=save_every), Path(config.model.path),
                        folder / "data", folder / "verl")  # fmt: skip
    update, sampling = config.update, config.sampling
    workflow = make_env(config.env, **config.env_options).workflow()
    extra: dict[str, object] = {
        "mas.rollout.max_turns": workflow.max_turns,
        "algorithm.use_kl_in_reward": "false",
        "actor_rollout_ref.actor.use_kl_loss": str(update.use_kl_loss).lower(),
        "actor_rollout_ref.actor.entropy_coeff": update.entropy_coeff,
        "actor_rollout_ref.actor.ppo_epochs": update.ppo_epochs,
        "data.max_prompt_length": PROMPT_TOKENS,
        "actor_rollout_ref.rollout.max_model_len": PROMPT_TOKENS + sampling.max_new_tokens,
        # verl packs micro-batches by tokens (mas_defaults' dynamic batches: verl refuses fixed micro-batches whose
        # mini-batch holds more samples than a step has tasks): about the local update's micro-batch of samples
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": micro_batch_tokens(config),
        "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu": micro_batch_tokens(config),
        # memory only: without it the actor's update peaked at 8.1 GB RSS, and beside the study's two local runs Ray's
        # memory monitor (95% of the machine) killed the actor mid-update (the platform profile turns it off)
        "actor_rollout_ref.model.enable_gradient_checkpointing": "true",
        "actor_rollout_ref.rollout.top_p": sampling.top_p,
        "actor_rollout_ref.rollout.top_k": sampling.top_k or -1,  # off: local 0, vLLM -1
        "trainer.resume_mode": "auto",
        "trainer.max_actor_ckpt_to_keep": KEEP_CHECKPOINTS,
        # every env option as hydra reads it (the base writes JSON, whose quoted dict keys hydra refuses)
        **{f"+mas.env_options.{key}": hydra_value(value) for key, value in config.env_options.items()},
    }
    return with_keys(base, extra)


def micro_batch_tokens(config: LocalTrainConfig) -> int:
    """The token budget of one of verl's micro-batches: the local micro-batch's samples at this task's typical length,
    and never below one sample at the length caps (verl refuses a budget below that)."""
    caps = PROMPT_TOKENS + config.sampling.max_new_tokens
    return max(config.update.micro_batch_size * SAMPLE_TOKENS, caps)


def hydra_value(value: object) -> str:
    """`value` (JSON-like) as a hydra override's value: dicts with bare keys, strings double-quoted."""
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{key}: {hydra_value(item)}" for key, item in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(hydra_value(item) for item in value) + "]"
    return json.dumps(value)


class GreedyPerProblem(RunCallbacks):
    """Each evaluation's greedy result per problem (1/0, in the evaluation split's order), from the very rollout
    `LocalRun.evaluate` reads its `eval/success` from."""

    def __init__(self) -> None:
        self.results: list[float] | None = None

    def rollout(self, run, prefix: str, results: Sequence[EpisodeResult]) -> Mapping[str, float]:
        if prefix == "eval":
            self.results = per_problem(run.config, results)
        return {}


def per_problem(config: LocalTrainConfig, results: Sequence[EpisodeResult]) -> list[float]:
    """Success per evaluation problem, in the split's order; one result for each problem, else an error."""
    order = [task.uid for task in make_tasks(config, "eval", 0, config.eval_tasks)]
    found = {result.task.uid: float(result.success) for result in results}
    if len(results) != len(order) or set(found) != set(order):
        raise ValueError(f"the evaluation gave {len(results)} results for {len(order)} problems")
    return [found[uid] for uid in order]


def readings(run: LocalRun, greedy: GreedyPerProblem) -> dict:
    """What the local arms read of a run's current weights: `evaluate()`'s greedy and sampled success, one episode a
    problem at LOW_TEMPERATURE, and the greedy result per problem."""
    greedy.results = None
    _, metrics = run.evaluate()
    low = sampled_success(run, LOW_TEMPERATURE)
    if greedy.results is None:
        raise RuntimeError("the evaluation's greedy rollout was not seen")
    return {
        "greedy": metrics["eval/success"],
        "sampled": metrics["eval_sampled/success"],
        f"sampled_t{LOW_TEMPERATURE}": low["success"],
        "greedy_per_problem": greedy.results,
    }


def before_and_after(config: LocalTrainConfig, weights: dict[str, dict]) -> dict:
    """The readings of the untuned model (`config` as built, no weights loaded), then of `weights` ({policy: state
    dict}) loaded into the same run: each reading as [before, after]."""
    greedy = GreedyPerProblem()
    run = LocalRun(config, log=lambda _: None, callbacks=[greedy])
    if set(weights) != set(run.models):
        raise ValueError(f"the checkpoint holds policies {sorted(weights)}, the local run {sorted(run.models)}")
    before = readings(run, greedy)
    for policy, state in weights.items():
        run.models[policy].load_state_dict(state)
    after = readings(run, greedy)
    return {key: [before[key], after[key]] for key in before}


@dataclass(frozen=True)
class LaunchedRun(CpuRun):
    """A verl run over all its launches: each earlier launch's metrics (moved aside) and the current one's, merged so
    that a step redone after a resume reads as its last launch logged it; the update audit, one record per (step,
    policy), the last written. `wall_s` is the launches' total."""

    launches: list[dict] = field(default_factory=list)

    def metrics(self) -> list[dict]:
        if not self.launches:
            return super().metrics()
        current, last = super().metrics(), len(self.launches) - 1
        return merged_metrics([
            (launch["resumed_from"], current if n == last else read_jsonl(earlier(self.folder, n)))
            for n, launch in enumerate(self.launches)
        ])  # fmt: skip

    def audit(self) -> list[dict]:
        last = {(record["step"], record["policy"]): record for record in super().audit()}
        return [last[key] for key in sorted(last)]


def merged_metrics(launches: list[tuple[int, list[dict]]]) -> list[dict]:
    """verl's metric rows ({"step", "data"}) of successive launches, each given with the step it resumed from: a
    launch's rows replace every earlier row after its resumed step, and rows of one step are merged into one."""
    by_step: dict[int, dict] = {}
    for resumed_from, rows in launches:
        by_step = {step: data for step, data in by_step.items() if step <= resumed_from}
        for row in rows:
            by_step[row["step"]] = {**by_step.get(row["step"], {}), **row["data"]}
    return [{"step": step, "data": data} for step, data in sorted(by_step.items())]


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line] if path.exists() else []


def launched_run(folder: Path) -> LaunchedRun:
    launches = read_jsonl(folder / LAUNCHES_FILE)
    wall = sum(launch.get("wall_s") or 0.0 for launch in launches)
    return LaunchedRun(folder, launches[-1].get("returncode") if launches else None, wall, launches)


def set_aside(folder: Path) -> None:
    """Move the last launch's log and metrics to EARLIER/<n>.log.txt and <n>.metrics.jsonl (n: its number), where
    the next launch would overwrite them."""
    number = len(read_jsonl(folder / LAUNCHES_FILE)) - 1
    for name in (LOG_FILE, METRICS_FILE):
        if (folder / name).exists():
            (folder / EARLIER).mkdir(exist_ok=True)
            (folder / name).rename(earlier(folder, number, name))


def earlier(folder: Path, number: int, name: str = METRICS_FILE) -> Path:
    """Where launch `number`'s file `name` lies once a later launch has started."""
    return folder / EARLIER / f"{number}.{name}"


def launch(folder: Path, overrides: list[str], timeout: float, stop_at: int | None) -> dict:
    """One launch of verl, resuming from its checkpoints: its line in LAUNCHES_FILE is written before it starts and
    rewritten when it ends (returncode None: stopped by `stop_at`, by the timeout or by a signal)."""
    folder.mkdir(parents=True, exist_ok=True)
    set_aside(folder)
    launches = read_jsonl(folder / LAUNCHES_FILE)
    entry = {"resumed_from": saved_step(folder / "checkpoints"), "date": time.strftime("%Y-%m-%d %H:%M")}
    write_launches(folder, [*launches, entry])
    started = time.monotonic()
    stop = (lambda: logged_and_saved(folder, stop_at)) if stop_at else None
    try:
        run = run_on_cpu(folder, overrides, timeout, kill_when=stop, audit=True)
        entry |= {"returncode": run.returncode, "wall_s": round(run.wall_s, 1)}
    finally:
        entry.setdefault("returncode", None)
        entry.setdefault("wall_s", round(time.monotonic() - started, 1))
        entry["saved_step"] = saved_step(folder / "checkpoints")
        write_launches(folder, [*launches, entry])
    return entry


def logged_and_saved(folder: Path, step: int) -> bool:
    """Whether every policy has saved `step` and verl has logged its metrics (it logs a step after saving it)."""
    if saved_step(folder / "checkpoints") < step:
        return False
    return any(row["step"] >= step and TRAIN_ROW_KEY in row["data"] for row in read_jsonl(folder / METRICS_FILE))


def write_launches(folder: Path, launches: list[dict]) -> None:
    (folder / LAUNCHES_FILE).write_text("".join(json.dumps(launch) + "\n" for launch in launches))


def reward_curve(rows: list[dict]) -> list[float]:
    """Per training step, the mean mixed reward over the samples that trained (the local `rollout/reward`): verl's
    per-turn means (`mas/turn_<t>/reward/mean`) weighted by their samples (`mas/turn_<t>/samples`)."""
    curve = []
    for data in training_rows(rows):
        turns = [key.split("/")[1] for key in data if key.startswith("mas/turn_") and key.endswith("/samples")]
        samples = sum(data[f"mas/{turn}/samples"] for turn in turns)
        curve.append(sum(data[f"mas/{turn}/reward/mean"] * data[f"mas/{turn}/samples"] for turn in turns) / samples)
    return curve


def training_rows(rows: list[dict]) -> list[dict]:
    return [row["data"] for row in rows if TRAIN_ROW_KEY in row["data"]]


def rows_read(checkpoints: Path) -> dict[int, int]:
    """{step: training rows verl's loader had read} at each kept checkpoint (its `data.pt`, one per policy): with the
    sequential sampler, step N's checkpoint should have read N x data.train_batch_size rows, resumed or not."""
    found: dict[int, int] = {}
    for path in checkpoints.glob("**/global_step_*/data.pt"):
        state = torch.load(path, map_location="cpu", weights_only=False)
        rows = (state.get("_sampler_iter_state") or {}).get("samples_yielded", -1)
        step = int(path.parent.name.split("_")[-1])
        found[step] = rows if found.get(step, rows) == rows else -1  # policies that disagree: -1
    return dict(sorted(found.items()))


def record_of(
    seed: int, router: str, overrides: list[str], verl: list[str], config: LocalTrainConfig, folder: Path,
    step: int, read: dict, started: float,
) -> dict:  # fmt: skip
    """The record `train_and_record` writes for a local arm, from the verl run's metrics and the readings, with the
    per-problem greedy results, the verl overrides and verl's own summary."""
    run = launched_run(folder / "verl")
    rows = run.metrics()
    trained = training_rows(rows)
    return {
        "seed": seed,
        "arm": ARMS[router],
        "overrides": overrides,
        "verl_overrides": verl,
        "steps": step,
        "eval_tasks": config.eval_tasks,
        **{key: value for key, value in read.items() if key != "greedy_per_problem"},
        "greedy_per_problem": read["greedy_per_problem"],
        "reward_curve": reward_curve(rows),
        # verl's group-health share (among groups of 2 or more: under the tree every group holds K samples)
        "zero_variance_curve": [data["group_health/zero_variance_share"] for data in trained],
        "start_arm": study.START,
        "step_s_median": statistics.median(data[TRAIN_ROW_KEY] for data in trained),
        "wall_s_this_command": round(time.perf_counter() - started, 1),
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "verl_summary": verl_summary(run),
        # the rows verl had read at each kept checkpoint, and whether they are the local run's (N x tasks a step)
        "rows_read_at_checkpoints": (read_rows := rows_read(folder / "verl" / "checkpoints")),
        "rows_read_as_local": bool(read_rows) and all(n == s * config.tasks_per_step for s, n in read_rows.items()),
        # steps a stop between a checkpoint and its log line left out of the curves (resumed after it: not redone)
        "steps_not_logged": sorted(set(range(1, step + 1)) - {r["step"] for r in rows if TRAIN_ROW_KEY in r["data"]}),
        "launches": run.launches,
    }


def run_arm(args: argparse.Namespace) -> dict | None:
    """Train (or resume) verl's run of `args.router` at `args.seed` up to its budget, then read it; the record, or
    None when verl stopped short of the budget (rerun the command to resume)."""
    started = time.perf_counter()
    folder = args.out / f"seed{args.seed}" / ARMS[args.router]
    overrides = local_overrides(args.seed, args.router, args.steps)
    config = local_config(overrides, folder / "local_reader")
    verl = verl_overrides(config, folder, args.save_every)
    write_data(config, folder)
    checkpoints = folder / "verl" / "checkpoints"
    if saved_step(checkpoints) < config.steps:
        ended = launch(folder / "verl", verl, args.timeout, args.stop_at)
        print(f"verl launch ended: {json.dumps(ended)}", flush=True)
        if ended["returncode"] not in (0, None):
            raise SystemExit(f"the verl run failed ({ended['returncode']}); see {folder / 'verl' / LOG_FILE}")
    step = saved_step(checkpoints)
    if step < config.steps:
        print(f"verl stopped at its step-{step} checkpoint of {config.steps}: rerun the command to resume", flush=True)
        return None
    roles = make_env(config.env, **config.env_options).workflow().roles
    saved = folder / f"readings_step{step}.json"  # kept: a later failure does not cost the evaluation again
    if saved.exists():
        read = json.loads(saved.read_text())
    else:
        weights = verl_checkpoints(checkpoints, list(PolicyRouter.from_spec(config.router, roles).policies))[step]
        read = before_and_after(config, weights)
        saved.write_text(json.dumps(read))
    return record_of(args.seed, args.router, overrides, verl, config, folder, step, read, started)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--router", required=True, choices=ROUTERS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=study.DEFAULT_OUT)
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds for one verl launch")
    parser.add_argument("--steps", type=int, default=None, help="probes only: steps instead of the design's 40")
    parser.add_argument("--save-every", type=int, default=SAVE_EVERY, help="probes only: checkpoint every N steps")
    parser.add_argument("--stop-at", type=int, default=None, help="probes only: kill verl once step N is saved")
    args = parser.parse_args(argv)
    args.out = args.out.resolve()
    probe = (args.steps, args.save_every, args.stop_at) != (None, SAVE_EVERY, None)
    if probe and args.out == study.DEFAULT_OUT.resolve():
        parser.error("--steps, --save-every and --stop-at are for probes: give them another --out than the study's")
    args.out.mkdir(parents=True, exist_ok=True)
    if (args.seed, ARMS[args.router]) in finished(args.out):
        print(f"seed {args.seed}, {ARMS[args.router]}: recorded already in {args.out / 'runs.jsonl'}")
        return
    # a stop by signal (a session's end) goes through run_on_cpu's clean-up, which kills verl's own session
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    record = run_arm(args)
    if record is not None:
        study.appended(args.out / "runs.jsonl", record)
        print(json.dumps({k: v for k, v in record.items() if k not in ("overrides", "verl_overrides", "launches")}))


if __name__ == "__main__":
    main()
