"""Benchmark: the memory of one base model with one LoRA adapter per role (`mas.lora_per_role`: one actor worker group,
one vLLM server) against one LoRA policy per role (`per_role` with `mas.policies.<p>.lora_rank`: a worker group and a
server per role), on verl's real stack on CPU, and their step times beside one LoRA adapter shared by every role
(`shared`).

Each configuration is one `python -m verl_mas.main +platform=cpu` launch of a tiny model (warm-started briefly by
the local engine: its weights do not matter here) for a few training steps; the step time is the median of verl's
`timing_s/step` after the first step (which also starts the agent loop and the servers' first requests). Every
second, the proportional set size (PSS: shared pages split between the processes that map them, so that the sum is
the memory used) of the launch's processes is read from /proc and summed per kind: the actor workers (Ray's
`WorkerDict` actors) and the servers (the vLLM server actor, its engine core and its workers). It prints the peak of
each sum, their ratio between the two configurations, and the step times.

On the CPU stack the model is tiny, so the figures are mostly the processes themselves (a Python interpreter with
torch per process); they count processes and copies, not a GPU's weights.

    python benchmarks/bench_lora_memory.py [--config lora_per_role --config per_role_lora]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from collections import defaultdict
from pathlib import Path

from verl_mas.verl_engine.cpu_run import prepare_tiny_stack, run_on_cpu, tiny_stack_overrides

WORK = Path(__file__).resolve().parents[1] / "runs" / "lora_memory"  # model, data, logs (not kept)
OPTIONS = {"size": 5, "wall_ratio": 0.2, "tool_mode": "compact", "max_turns": 3, "brief_prompts": True}
POLICIES = ("tool", "plan")
LORA = ["actor_rollout_ref.model.lora_alpha=16", "actor_rollout_ref.model.target_modules=all-linear"]
CONFIGS = {
    "shared_lora": ["mas.router=shared", "actor_rollout_ref.model.lora_rank=8", *LORA],  # one adapter for both roles
    "lora_per_role": ["mas.router=per_role", "mas.lora_per_role=true", "actor_rollout_ref.model.lora_rank=8", *LORA],
    "per_role_lora": [
        "mas.router=per_role",
        *(f"+mas.policies.{p}.lora_rank=8" for p in POLICIES),
        *LORA,
        f"trainer.n_gpus_per_node={len(POLICIES)}",
        f"ray_kwargs.ray_init.num_gpus={len(POLICIES)}",
    ],
}
KINDS = {"actor workers": ("WorkerDict",), "servers": ("HttpServer", "EngineCore", "VLLM::")}


def process_kind(cmdline: str) -> str | None:
    for kind, marks in KINDS.items():
        if any(mark in cmdline for mark in marks):
            return kind
    return None


def pss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/smaps_rollup") as rollup:
        for line in rollup:
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    return 0


class MemorySampler:
    """Called once a second by `run_on_cpu` (as its `kill_when`, always answering no): the PSS of the launch's
    processes per kind, and the peak of each kind's sum."""

    def __init__(self, folder: Path) -> None:
        self.marker = str(folder)  # the driver's command line names the launch folder
        self.session: int | None = None
        self.peak: dict[str, int] = defaultdict(int)
        self.processes: dict[str, int] = defaultdict(int)

    def __call__(self) -> bool:
        totals: dict[str, int] = defaultdict(int)
        counts: dict[str, int] = defaultdict(int)
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            pid = int(entry)
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                if self.session is None and "verl_mas.main" in cmdline and self.marker in cmdline:
                    self.session = os.getsid(pid)
                if self.session is None or os.getsid(pid) != self.session:
                    continue
                kind = process_kind(cmdline)
                if kind is not None:
                    totals[kind] += pss_bytes(pid)
                    counts[kind] += 1
            except (FileNotFoundError, ProcessLookupError, PermissionError):
                continue  # a process that ended while being read
        for kind, total in totals.items():
            if total > self.peak[kind]:
                self.peak[kind], self.processes[kind] = total, counts[kind]
        return False


def prepare(root: Path) -> None:
    if (root / "model" / "model.safetensors").exists():
        return
    prepare_tiny_stack(root, OPTIONS, warm_tasks=16, warm_epochs=1, n_train=8, n_eval=4)


def launch(root: Path, name: str, overrides: list[str], steps: int, timeout_s: float) -> dict:
    folder = root / name
    sampler = MemorySampler(folder)
    run = run_on_cpu(
        folder,
        [
            *tiny_stack_overrides(root, OPTIONS, k=4, steps=steps),
            "trainer.val_before_train=false",
            "trainer.test_freq=-1",
            "trainer.save_freq=-1",
            f"trainer.default_local_dir={root / 'checkpoints' / name}",
            *overrides,
        ],
        timeout_s=timeout_s,
        kill_when=sampler,
    )
    if run.returncode != 0:
        raise RuntimeError(f"{name} failed ({run.returncode}); see {folder / 'log.txt'}")
    step_s = [row["data"]["timing_s/step"] for row in run.metrics() if "timing_s/step" in row["data"]]
    return {
        "peak_pss_mib": {kind: round(value / 2**20, 1) for kind, value in sampler.peak.items()},
        "processes_at_peak": dict(sampler.processes),
        "step_s": [round(value, 2) for value in step_s],
        "median_step_s_after_first": round(statistics.median(step_s[1:]), 2) if len(step_s) > 1 else None,
        "launch_s": round(run.wall_s, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per launch")
    parser.add_argument("--steps", type=int, default=3, help="training steps per launch")
    parser.add_argument("--config", action="append", choices=sorted(CONFIGS), help="run only these (repeatable)")
    args = parser.parse_args()
    prepare(WORK)
    names = args.config or list(CONFIGS)
    results = {name: launch(WORK, name, CONFIGS[name], args.steps, args.timeout) for name in names}
    print(json.dumps(results, indent=1))
    if "lora_per_role" in results and "per_role_lora" in results:
        for kind in KINDS:
            l2, l3 = (results[name]["peak_pss_mib"].get(kind) for name in ("lora_per_role", "per_role_lora"))
            if l2 and l3:
                print(f"{kind}: lora_per_role {l2} MiB, per_role_lora {l3} MiB, ratio {l2 / l3:.2f}")


if __name__ == "__main__":
    main()
