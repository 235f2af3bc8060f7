"""Study: the memory of one base model with one LoRA adapter per role (L2, `mas.lora_per_role`: one actor worker
group, one vLLM server) against one LoRA policy per role (L3, `per_role` with `mas.policies.<p>.lora_rank`: a worker
group and a server per role), at two and three roles, on verl's real stack on CPU; and the step time of L2 against
one LoRA adapter shared by every role (`shared`).

Each configuration is one `python -m verl_mas.main +platform=cpu` launch of a tiny model (warm-started briefly by
the local engine on Plan-Path: its weights do not matter here), rank 8 on every linear layer. Two roles: Plan-Path
(tool, plan). Three roles: `three_role_env.py`'s Plan-Path with a review agent, a user's own environment, which the
launch finds through the `verl_mas.envs` entry point (`plug_in_env`). Every second, the proportional set size (PSS:
shared pages split between the processes that map them, so that the sum is the memory used) and the unique set size
(USS: the process's private pages only) of the launch's processes are read from /proc and summed per kind: the actor
workers (Ray's `WorkerDict` actors) and the servers (the vLLM server actor, its engine core and its workers). The
peak of each sum is the figure. On the CPU stack the model is tiny, so the figures are mostly the processes
themselves (a Python interpreter with torch per process); they count processes and copies, not a GPU's weights.

    python -m research.lora_memory memory [--roles 2 --roles 3]   # -> data/lora_memory.json
    python -m research.lora_memory timing [--pairs 3]             # -> data/lora_step_time.json

The records of 2026-11-28 were written when this script was `benchmarks/bench_lora_memory.py` (the same measuring
code, since moved here beside its page and data); their `command` fields keep that path.

When other verl-mas launches share the machine, run it with a /tmp of its own (as root):
`unshare -m sh -c 'mount -t tmpfs none /tmp && python -m research.lora_memory ...'`. verl's weight-sync
socket is /tmp/rl-colocate-zmq-<Ray job id>-mas_<policy>-replica-<r>-rank-<l>.sock, and every fresh Ray cluster's
first job id is 01000000: two launches with a policy of the same name at once meet on one path, and the weight sync
hangs (seen on 2026-11-28 beside another `lora_per_role` run: both bound ...-mas_adapters-...).

Design (2026-11-28; the two-role prediction was written after a two-role reading of 0.54, see the page):
- memory: arms L2 and L3 at 2 roles, then at 3 roles, one launch each, 3 training steps of 4 tasks x K = 4.
  Endpoint: peak PSS per kind and the ratio L2 / L3 (peak USS beside it). Prediction: about 1 / roles for both
  kinds (one process set against one per role; three adapters add nothing visible on a tiny model): 0.5 at two
  roles, 0.33-0.4 at three. Validity: every launch finishes its steps, and the processes at the peak are
  1 worker and 3 server processes per policy (L2: 1 and 3; L3: roles and 3 x roles).
- timing: two roles, separate launches alternating L2, shared, L2, shared, ... for `--pairs` pairs (3; 4 at first,
  lowered before any timing launch because other runs loaded the machine to 10-30), 5 training steps each.
  Endpoint: per launch the median of verl's `timing_s/step` after the first step (which also starts the agent loop
  and the servers' first requests); per arm the median over its launches, and L2 / shared of those medians, with
  the range of the launches' medians and of the per-pair ratios. Prediction: within the noise of 1 (both arms
  generate and train the same rows on one worker group and one server; L2 adds an adapter switch per policy
  call). The machine has 2 cores shared with other jobs: a ratio whose per-pair range spans 1 is noise.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from research.lora_memory.three_role_env import NAME as THREE_ROLE_ENV
from research.lora_memory.three_role_env import ROLES as THREE_ROLES
from verl_mas.cpu_run import prepare_tiny_stack, run_on_cpu, tiny_stack_overrides
from verl_mas.dataset import write_dataset

WORK = Path(__file__).resolve().parents[2] / "runs" / "lora_memory"  # model, data, logs (not kept)
DATA = Path(__file__).resolve().parent / "data"  # the records the page reads
ENV_MODULE = Path(__file__).with_name("three_role_env.py")
OPTIONS = {"size": 5, "wall_ratio": 0.2, "tool_mode": "compact", "max_turns": 3, "brief_prompts": True}
ROLES = {2: ("tool", "plan"), 3: THREE_ROLES}
RANK = 8
LORA = [
    f"actor_rollout_ref.model.lora_rank={RANK}",
    "actor_rollout_ref.model.lora_alpha=16",
    "actor_rollout_ref.model.target_modules=all-linear",
]
L2, L3, SHARED = "lora_per_role", "per_role_lora", "shared_lora"
KINDS = {"actor workers": ("WorkerDict",), "servers": ("HttpServer", "EngineCore", "VLLM::")}
MEMORY_STEPS, TIMING_STEPS = 3, 5


def configs(roles: tuple[str, ...]) -> dict[str, list[str]]:
    """The overrides of each arm for an environment with `roles`."""
    return {
        SHARED: ["mas.router=shared", *LORA],  # one adapter for every role
        L2: ["mas.router=per_role", "mas.lora_per_role=true", *LORA],
        L3: [
            "mas.router=per_role",
            *LORA[1:],
            *(f"+mas.policies.{role}.lora_rank={RANK}" for role in roles),
            f"trainer.n_gpus_per_node={len(roles)}",
            f"ray_kwargs.ray_init.num_gpus={len(roles)}",
            # Ray's logical CPUs (the machine's 2 by default): each policy's placement group reserves 3 (verl's
            # max_colocate_count), and 3 pools waited forever; logical only, no process gets more threads
            f"ray_kwargs.ray_init.num_cpus={3 * len(roles) + 8}",
        ],
    }


def process_kind(cmdline: str) -> str | None:
    for kind, marks in KINDS.items():
        if any(mark in cmdline for mark in marks):
            return kind
    return None


def set_sizes(pid: int) -> tuple[int, int]:
    """The process's PSS and USS in bytes, from /proc/PID/smaps_rollup."""
    fields: dict[str, int] = {}
    with open(f"/proc/{pid}/smaps_rollup") as rollup:
        for line in rollup:
            name, _, rest = line.partition(":")
            if name in ("Pss", "Private_Clean", "Private_Dirty"):
                fields[name] = int(rest.split()[0]) * 1024
    return fields.get("Pss", 0), fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0)


class MemorySampler:
    """Called once a second by `run_on_cpu` (as its `kill_when`, always answering no): the PSS and USS of the
    launch's processes summed per kind, the peak of each sum, and how many processes the PSS peak had."""

    def __init__(self, folder: Path) -> None:
        self.marker = str(folder)  # the driver's command line names the launch folder
        self.session: int | None = None
        self.peak_pss: dict[str, int] = defaultdict(int)
        self.peak_uss: dict[str, int] = defaultdict(int)
        self.processes: dict[str, int] = defaultdict(int)

    def __call__(self) -> bool:
        pss: dict[str, int] = defaultdict(int)
        uss: dict[str, int] = defaultdict(int)
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
                    sizes = set_sizes(pid)
                    pss[kind] += sizes[0]
                    uss[kind] += sizes[1]
                    counts[kind] += 1
            except (FileNotFoundError, ProcessLookupError, PermissionError):
                continue  # a process that ended while being read
        for kind in pss:
            if pss[kind] > self.peak_pss[kind]:
                self.peak_pss[kind], self.processes[kind] = pss[kind], counts[kind]
            self.peak_uss[kind] = max(self.peak_uss[kind], uss[kind])
        return False


def plug_in_env(folder: Path) -> None:
    """Make the three-role environment findable in every process of a launch from `folder`, as installing a package
    that advertises it would: its module and a distribution's metadata naming it under the `verl_mas.envs` entry
    point, in the launch's working directory, which is on the path of the driver and of Ray's workers."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(ENV_MODULE, folder / ENV_MODULE.name)
    info = folder / "plan_path_review-0.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: plan-path-review\nVersion: 0\n")
    (info / "entry_points.txt").write_text(f"[verl_mas.envs]\n{THREE_ROLE_ENV} = three_role_env:ReviewedPlanPath\n")


def prepare(roles: int) -> Path:
    """The root a launch with `roles` roles starts from (see `tiny_stack_overrides`): the tiny model, and the data
    of Plan-Path (2) or of the three-role environment (3, beside a link to the same model)."""
    if not (WORK / "model" / "model.safetensors").exists():
        prepare_tiny_stack(WORK, OPTIONS, warm_tasks=16, warm_epochs=1, n_train=8, n_eval=4)
    if roles == 2:
        return WORK
    root = WORK / "three_roles"
    if not (root / "data" / "train.parquet").exists():
        root.mkdir(parents=True, exist_ok=True)
        (root / "model").unlink(missing_ok=True)
        (root / "model").symlink_to(WORK / "model")
        write_dataset(THREE_ROLE_ENV, root / "data", n_train=8, n_eval=4, seed=0, options=OPTIONS)
    return root


def launch(roles: int, arm: str, name: str, steps: int, timeout_s: float) -> dict:
    """One launch of `arm` with `roles` roles: its peak memory per kind and its step times."""
    root = prepare(roles)
    folder = WORK / name
    shutil.rmtree(folder, ignore_errors=True)
    env = []
    if roles == 3:
        plug_in_env(folder)
        env = [f"mas.env={THREE_ROLE_ENV}"]
    sampler = MemorySampler(folder)
    run = run_on_cpu(
        folder,
        [
            *tiny_stack_overrides(root, OPTIONS, k=4, steps=steps),
            *env,
            "trainer.val_before_train=false",
            "trainer.test_freq=-1",
            "trainer.save_freq=-1",
            f"trainer.default_local_dir={WORK / 'checkpoints' / name}",
            *configs(ROLES[roles])[arm],
        ],
        timeout_s=timeout_s,
        kill_when=sampler,
    )
    if run.returncode != 0:
        raise RuntimeError(f"{name} failed ({run.returncode}); see {folder / 'log.txt'}")
    step_s = [row["data"]["timing_s/step"] for row in run.metrics() if "timing_s/step" in row["data"]]
    if len(step_s) != steps:
        raise RuntimeError(f"{name}: {len(step_s)} step times logged for {steps} steps; see {folder / 'log.txt'}")
    return {
        "roles": roles,
        "arm": arm,
        "peak_pss_mib": {kind: mib(value) for kind, value in sampler.peak_pss.items()},
        "peak_uss_mib": {kind: mib(value) for kind, value in sampler.peak_uss.items()},
        "processes_at_peak": dict(sampler.processes),
        "step_s": [round(value, 2) for value in step_s],
        "median_step_s_after_first": round(statistics.median(step_s[1:]), 2),
        "launch_s": round(run.wall_s, 1),
        "finished_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        "load_average": os.getloadavg(),
    }


def mib(value: int) -> float:
    return round(value / 2**20, 1)


def memory_figures(launches: list[dict]) -> dict:
    """Per roles count, L2 / L3 of each kind's peak PSS and USS."""
    ratios = {}
    for roles in sorted({run["roles"] for run in launches}):
        by_arm = {run["arm"]: run for run in launches if run["roles"] == roles}
        if {L2, L3} <= by_arm.keys():
            ratios[str(roles)] = {
                f"{measure} {kind}": round(by_arm[L2][measure][kind] / by_arm[L3][measure][kind], 3)
                for measure in ("peak_pss_mib", "peak_uss_mib")
                for kind in KINDS
            }
    return {"launches": launches, "l2_over_l3": ratios}


def timing_figures(launches: list[dict]) -> dict:
    """Per arm the median of its launches' medians and their range; L2 / shared of the medians, and the range of
    the ratios within each pair (launches 2i and 2i + 1)."""
    medians = {arm: [run["median_step_s_after_first"] for run in launches if run["arm"] == arm] for arm in (L2, SHARED)}
    figures: dict = {"launches": launches}
    if all(medians.values()):
        figures["arms"] = {
            arm: {"median_s": statistics.median(values), "range_s": [min(values), max(values)], "launches": len(values)}
            for arm, values in medians.items()
        }
        figures["l2_over_shared"] = round(statistics.median(medians[L2]) / statistics.median(medians[SHARED]), 3)
        pairs = [l2 / shared for l2, shared in zip(medians[L2], medians[SHARED], strict=False)]
        figures["pair_ratio_range"] = [round(min(pairs), 3), round(max(pairs), 3)]
    return figures


def kept_launches(rerun: set[tuple[int, str]]) -> list[dict]:
    """The memory record's launches of the (roles, arm) pairs not run again: the record holds the latest of each."""
    path = DATA / "lora_memory.json"
    if not path.exists():
        return []
    return [run for run in json.loads(path.read_text())["launches"] if (run["roles"], run["arm"]) not in rerun]


def command() -> str:
    return "python -m research.lora_memory " + " ".join(sys.argv[1:])


def record(name: str, figures: dict[str, Any], complete: bool) -> Path:
    """Write data/NAME.json: the figures beside the machine they were measured on."""
    machine = {
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
    }
    out = DATA / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    header = {"date": time.strftime("%Y-%m-%d"), "command": command(), "complete": complete}
    out.write_text(json.dumps(header | figures | machine, indent=2) + "\n")
    print(f"wrote {out}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m research.lora_memory", description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("memory", "timing"))
    parser.add_argument("--roles", type=int, action="append", choices=sorted(ROLES), help="memory: roles (repeatable)")
    parser.add_argument("--arm", action="append", choices=(L2, L3), help="memory: only these arms (repeatable)")
    parser.add_argument("--pairs", type=int, default=3, help="timing: alternating L2 / shared pairs of launches")
    parser.add_argument("--timeout", type=float, default=1200.0, help="seconds per launch")
    args = parser.parse_args()
    launches: list[dict] = []
    if args.what == "memory":
        arms = args.arm or (L2, L3)
        plan = [(roles, arm, f"memory_{roles}roles_{arm}") for roles in args.roles or sorted(ROLES) for arm in arms]
        launches = kept_launches({(roles, arm) for roles, arm, _ in plan})
        summarise, name, steps = memory_figures, "lora_memory", MEMORY_STEPS
    else:
        plan = [(2, arm, f"timing_{i}_{arm}") for i in range(args.pairs) for arm in (L2, SHARED)]
        summarise, name, steps = timing_figures, "lora_step_time", TIMING_STEPS
    for number, (roles, arm, folder) in enumerate(plan, 1):
        launches.append(launch(roles, arm, folder, steps, args.timeout) | {"command": command()})
        print(json.dumps(launches[-1]), flush=True)
        record(name, summarise(launches), complete=number == len(plan))  # kept after every launch
    print(json.dumps({key: value for key, value in summarise(launches).items() if key != "launches"}, indent=1))


if __name__ == "__main__":
    main()
