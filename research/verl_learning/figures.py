"""verl's stack against the local engine on CPU (research/verl_learning/README.md), from data/shared.json and
data/per_role.json (seed 0) and data/ROUTER_seedS.json (the replication's seeds): every change is paired per board
over the same 256 held-out boards. L2's figures are research/lora_learning's, from these helpers."""

from __future__ import annotations

import json
from pathlib import Path

from verl_mas.stats import difference_summary, markdown_table, mean_se_text, number, summary_text

DATA = Path(__file__).resolve().parent / "data"
ROUTERS = ("shared", "per_role")  # L2 (lora_per_role): research/lora_learning
# The replication design (README): seeds 0-2 per router, each router at its first runs' budget; learning through verl
# holds for a router when the mean of its verl runs' sampled gains over all REPLICATION_SEEDS has a t interval above 0.
REPLICATION_SEEDS = (0, 1, 2)
BUDGET = {"shared": 200, "per_role": 100}
ENGINES = ("local", "verl")


def read(router: str) -> dict:
    return json.loads((DATA / f"{router}.json").read_text())


def record_file(router: str, seed: int) -> str:
    """A seed's record: ROUTER.json for seed 0 (the first runs), ROUTER_seedS.json for the replication's."""
    return f"{router}.json" if seed == 0 else f"{router}_seed{seed}.json"


def seed_records(router: str, data: Path = DATA) -> dict[int, dict]:
    """{seed: record} of the replication seeds whose runs have a record in `data`."""
    paths = {seed: data / record_file(router, seed) for seed in REPLICATION_SEEDS}
    return {seed: json.loads(path.read_text()) for seed, path in paths.items() if path.exists()}


def per_board(record: dict, engine: str, step: int, mode: str) -> list[float]:
    """Each board's success at `step`: greedy 0/1, sampled the share of its 2 episodes solved."""
    cells = record["board_results"][engine][str(step)][mode]
    scale = 1 if mode == "greedy" else record["sampled_episodes_per_board"]
    return [int(c) / scale for c in cells]


def last_common_step(record: dict) -> int:
    """The last step both engines have a reading at: the budget, or where a stopped verl run left off."""
    steps = [{int(step) for step in record["board_results"][engine]} for engine in ("local", "verl")]
    return max(steps[0] & steps[1])


def verl_minus_local(record: dict, step: int, mode: str) -> dict:
    """Per board, verl's reading minus the local engine's at `step`."""
    verl, local = per_board(record, "verl", step, mode), per_board(record, "local", step, mode)
    return difference_summary([v - lo for v, lo in zip(verl, local, strict=True)])


def change(record: dict, engine: str, step: int, mode: str) -> dict:
    """Per board, the reading at `step` minus step 0 (the shared warm start)."""
    after, before = per_board(record, engine, step, mode), per_board(record, engine, 0, mode)
    return difference_summary([a - b for a, b in zip(after, before, strict=True)])


def changes_table() -> str:
    lines = [["router", "engine", "steps", "sampled change (SE) [95%]", "greedy change (SE) [95%]"]]
    for router in ROUTERS:
        record = read(router)
        ends = [100, 200] if router == "shared" else [last_common_step(record)]
        for engine in ("local", "verl"):
            for step in ends:
                cells = [summary_text(change(record, engine, step, mode)) for mode in ("sampled", "greedy")]
                lines.append([f"`{router}`", engine, str(step), *cells])
    return markdown_table(lines) + "\n\nSeed 0, one run per engine and router; n = 256 boards per change."


def spread_table() -> str:
    """At each router's last step: verl against every local run (main and other sampler seeds)."""
    lines = [["router", "step", "mode", "verl", "local runs (min - max)", "verl - main local run (SE) [95%]"]]
    for router in ROUTERS:
        record = read(router)
        last = last_common_step(record)
        at = record["steps"].index(last)
        locals_ = [curve for name, curve in record["curves"].items() if name.startswith("local")]
        for mode in ("sampled", "greedy"):
            values = [curve[mode][at] for curve in locals_]
            runs = (
                f"{len(values)} runs: {number(min(values))} - {number(max(values))}"
                if len(values) > 1
                else f"1 run: {number(values[0])}"
            )
            lines.append(
                [
                    f"`{router}`",
                    str(last),
                    mode,
                    number(record["curves"]["verl"][mode][at]),
                    runs,
                    summary_text(verl_minus_local(record, last, mode)),
                ]
            )
    return markdown_table(lines)


def gain_split(record: dict, engine: str, step: int) -> dict[str, dict]:
    """The sampled change from step 0 at `step`, paired per board, and its two parts, each a mean over all boards (so
    that they add up to it): on boards the warm start did not solve greedily ("new") and on boards it did
    ("solved")."""
    after, before = per_board(record, engine, step, "sampled"), per_board(record, engine, 0, "sampled")
    solved = per_board(record, engine, 0, "greedy")
    gains = [a - b for a, b in zip(after, before, strict=True)]
    return {
        "total": difference_summary(gains),
        "new": difference_summary([g * (1 - s) for g, s in zip(gains, solved, strict=True)]),
        "solved": difference_summary([g * s for g, s in zip(gains, solved, strict=True)]),
    }


PARTS = {"new": "boards unsolved greedily before RL", "solved": "boards solved greedily before RL"}


def seed_readings(records: dict[int, dict], step: int) -> dict[str, dict[int, float]]:
    """Per figure, {seed: its mean over boards at `step`}: each engine's sampled and greedy change from step 0 and the
    sampled change's two parts (`gain_split`), and verl minus local, sampled and greedy."""
    out: dict[str, dict[int, float]] = {}
    for seed, record in sorted(records.items()):
        for engine in ENGINES:
            split = gain_split(record, engine, step)
            out.setdefault(f"{engine}, sampled", {})[seed] = split["total"]["mean"]
            for part, boards in PARTS.items():
                out.setdefault(f"{engine}, sampled, on {boards}", {})[seed] = split[part]["mean"]
            out.setdefault(f"{engine}, greedy", {})[seed] = change(record, engine, step, "greedy")["mean"]
        for mode in ("sampled", "greedy"):
            out.setdefault(f"verl - local, {mode}", {})[seed] = verl_minus_local(record, step, mode)["mean"]
    return out


def replication_bar(seeds: dict[int, float]) -> str:
    """The design's bar on verl's sampled gains per seed: met when all REPLICATION_SEEDS have run and the t interval
    of their mean is above 0; below that many seeds, interim."""
    missing = [seed for seed in REPLICATION_SEEDS if seed not in seeds]
    if missing:
        return f"interim: seed {', '.join(map(str, missing))} not run"
    low = difference_summary(list(seeds.values()))["ci95"][0]
    return "**holds**" if low > 0 else "**does not hold**"


def replication_seed_table(routers: dict[str, dict[int, dict]]) -> str:
    """Per router, seed and engine: the warm start's success (step 0), and at the budget the sampled and greedy change
    from step 0 (SE, 95%) and the sampled change's two parts (SE)."""
    lines = [
        [
            "router",
            "seed",
            "engine",
            "step 0, sampled / greedy",
            "sampled change (SE) [95%]",
            "greedy change (SE) [95%]",
            "sampled, boards unsolved greedily before RL (SE)",
            "sampled, boards solved greedily before (SE)",
        ]
    ]
    for router, records in routers.items():
        for seed, record in sorted(records.items()):
            for engine in ENGINES:
                split = gain_split(record, engine, BUDGET[router])
                modes = [summary_text(change(record, engine, BUDGET[router], mode)) for mode in ("sampled", "greedy")]
                parts = [mean_se_text(split[part]["mean"], split[part]["se"]) for part in ("new", "solved")]
                start = "/".join(
                    number(sum(v) / len(v)) for v in (per_board(record, engine, 0, m) for m in ("sampled", "greedy"))
                )
                lines.append([f"`{router}`", str(seed), engine, start.replace("/", " / "), *modes, *parts])
    return markdown_table(lines)


def replication_mean_table(routers: dict[str, dict[int, dict]]) -> str:
    """Per router and figure, the mean over the seeds run with its t interval (n = seeds), and the bar on verl's
    sampled gain."""
    lines = [["router", "figure", "per seed", "mean (SE) [95% t]", "bar"]]
    for router, records in routers.items():
        for figure, seeds in seed_readings(records, BUDGET[router]).items():
            if figure.startswith("verl - local"):
                continue
            per_seed = ", ".join(f"{seed}: {number(value, signed=True)}" for seed, value in seeds.items())
            bar = replication_bar(seeds) if figure == "verl, sampled" else ""
            lines.append([f"`{router}`", figure, per_seed, summary_text(difference_summary(list(seeds.values()))), bar])
    return markdown_table(lines)


def replication_gap_table(routers: dict[str, dict[int, dict]]) -> str:
    """Per router and seed, verl minus its local twin at the budget, paired per board (SE, 95%)."""
    lines = [["router", "seed", "sampled verl - local (SE) [95%]", "greedy verl - local (SE) [95%]"]]
    for router, records in routers.items():
        for seed, record in sorted(records.items()):
            cells = [summary_text(verl_minus_local(record, BUDGET[router], mode)) for mode in ("sampled", "greedy")]
            lines.append([f"`{router}`", str(seed), *cells])
        readings = seed_readings(records, BUDGET[router])
        means = [
            summary_text(difference_summary(list(readings[f"verl - local, {mode}"].values())))
            for mode in ("sampled", "greedy")
        ]
        lines.append([f"`{router}`", f"mean of {len(records)} [95% t]", *means])
    return markdown_table(lines)


def replication_note(routers: dict[str, dict[int, dict]]) -> str:
    """How many seeds each router's figures hold, and which runs the design still lacks."""
    held = "; ".join(
        f"`{router}` {len(records)}" + (f" (seed {', '.join(map(str, sorted(records)))})" if records else "")
        for router, records in routers.items()
    )
    missing = [
        f"`{router}` seed {seed}"
        for router, records in routers.items()
        for seed in REPLICATION_SEEDS
        if seed not in records
    ]
    status = f"**Interim**: not yet run: {', '.join(missing)}." if missing else "Every run of the design is in."
    return (
        f"Seeds with both engines' runs: {held}. Per seed, n = 256 boards; over seeds, n = the seeds listed, t with "
        f"n - 1 degrees of freedom. {status}"
    )


def curve_table(router: str) -> str:
    return curve_rows(read(router))


def curve_rows(record: dict) -> str:
    """Every run's held-out success at every checkpoint, "-" past where a run stopped."""
    lines = [["step", *map(str, record["steps"])]]
    for name, curve in record["curves"].items():
        for mode in ("sampled", "greedy"):
            missing = ["-"] * (len(record["steps"]) - len(curve[mode]))  # a run stopped early: its last steps
            lines.append([f"{name}, {mode}", *map(number, curve[mode]), *missing])
    return markdown_table(lines)


TIME_HEADER = ["router", "engine", "generation", "old log-prob", "update", "step"]


def time_rows(router: str, step_s: dict[str, dict]) -> list[list[str]]:
    """A record's median phase times (s) per engine, one row each."""
    rows = []
    for engine, times in step_s.items():
        cells = [
            "(in update)" if times[k] is None else f"{times[k]:.2f}"
            for k in ("generation", "old_log_prob", "update", "step")
        ]
        rows.append([f"`{router}`", engine, *cells])
    return rows


def time_table() -> str:
    return markdown_table(
        [TIME_HEADER, *(row for router in ROUTERS for row in time_rows(router, read(router)["step_s"]))]
    )


def tables() -> dict[str, str]:
    replication = {router: seed_records(router) for router in BUDGET}
    note = replication_note(replication)
    return {
        "replication_seeds": replication_seed_table(replication) + "\n\n" + note,
        "replication_mean": replication_mean_table(replication),
        "replication_gap": replication_gap_table(replication),
        "changes": changes_table(),
        "spread": spread_table(),
        "curve_shared": curve_table("shared"),
        "curve_per_role": curve_table("per_role"),
        "times": time_table(),
        "headline": replication_headline(replication),
    }


def replication_headline(routers: dict[str, dict[int, dict]]) -> str:
    """verl's sampled gain at each router's budget, the mean over the seeds run with its t interval."""
    parts = []
    for router, records in routers.items():
        seeds = seed_readings(records, BUDGET[router])["verl, sampled"]
        parts.append(
            f"`{router}` ({BUDGET[router]} steps, seeds {', '.join(map(str, seeds))}) "
            f"{summary_text(difference_summary(list(seeds.values())))}"
        )
    return "verl, sampled change from the warm start, mean over seeds [95% t]: " + "; ".join(parts)
