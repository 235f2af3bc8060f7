"""verl's stack against the local engine on CPU (research/verl_learning/README.md), from data/shared.json and
data/per_role.json: every change is paired per board over the same 256 held-out boards."""

from __future__ import annotations

import json
from pathlib import Path

from research.stats import difference_summary, markdown_table, number, summary_text

DATA = Path(__file__).resolve().parent / "data"
ROUTERS = ("shared", "per_role")


def read(router: str) -> dict:
    return json.loads((DATA / f"{router}.json").read_text())


def per_board(record: dict, engine: str, step: int, mode: str) -> list[float]:
    """Each board's success at `step`: greedy 0/1, sampled the share of its 2 episodes solved."""
    cells = record["board_results"][engine][str(step)][mode]
    scale = 1 if mode == "greedy" else record["sampled_episodes_per_board"]
    return [int(c) / scale for c in cells]


def change(record: dict, engine: str, step: int, mode: str) -> dict:
    """Per board, the reading at `step` minus step 0 (the shared warm start)."""
    after, before = per_board(record, engine, step, mode), per_board(record, engine, 0, mode)
    return difference_summary([a - b for a, b in zip(after, before)])


def changes_table() -> str:
    lines = [["router", "engine", "steps", "sampled change (SE) [95%]", "greedy change (SE) [95%]"]]
    for router in ROUTERS:
        record = read(router)
        ends = [100, 200] if router == "shared" else [100]
        for engine in ("local", "verl"):
            for step in ends:
                cells = [summary_text(change(record, engine, step, mode)) for mode in ("sampled", "greedy")]
                lines.append([f"`{router}`", engine, str(step), *cells])
    return markdown_table(lines) + "\n\nOne run per engine and router; n = 256 boards per change."


def spread_table() -> str:
    """At each router's last step: verl against every local run (main and other sampler seeds)."""
    lines = [["router", "step", "mode", "verl", "local runs (min - max)", "verl - main local run (SE) [95%]"]]
    for router in ROUTERS:
        record = read(router)
        last = record["steps"][-1]
        locals_ = [curve for name, curve in record["curves"].items() if name.startswith("local")]
        for mode in ("sampled", "greedy"):
            values = [curve[mode][-1] for curve in locals_]
            verl_minus_local = difference_summary(
                [v - l for v, l in zip(per_board(record, "verl", last, mode), per_board(record, "local", last, mode))]
            )
            lines.append([f"`{router}`", str(last), mode, number(record["curves"]["verl"][mode][-1]),
                          f"{len(values)} runs: {number(min(values))} - {number(max(values))}", summary_text(verl_minus_local)])
    return markdown_table(lines)


def solved_share_table() -> str:
    """How much of verl's sampled gain comes from boards the warm start already solved greedily."""
    lines = [["router", "steps", "sampled gain", "of it on boards solved greedily before RL", "share"]]
    for router in ROUTERS:
        record = read(router)
        last = record["steps"][-1]
        before_greedy = per_board(record, "verl", 0, "greedy")
        gains = [a - b for a, b in zip(per_board(record, "verl", last, "sampled"), per_board(record, "verl", 0, "sampled"))]
        total = sum(gains) / len(gains)
        on_solved = sum(g for g, solved in zip(gains, before_greedy) if solved) / len(gains)
        lines.append([f"`{router}`", str(last), number(total, signed=True), number(on_solved, signed=True), f"{on_solved / total:.2f}"])
    return markdown_table(lines)


def curve_table(router: str) -> str:
    record = read(router)
    lines = [["step", *map(str, record["steps"])]]
    for name, curve in record["curves"].items():
        for mode in ("sampled", "greedy"):
            lines.append([f"{name}, {mode}", *map(number, curve[mode])])
    return markdown_table(lines)


def time_table() -> str:
    lines = [["router", "engine", "generation", "old log-prob", "update", "step"]]
    for router in ROUTERS:
        for engine, times in read(router)["step_s"].items():
            cells = ["(in update)" if times[k] is None else f"{times[k]:.2f}" for k in ("generation", "old_log_prob", "update", "step")]
            lines.append([f"`{router}`", engine, *cells])
    return markdown_table(lines)


def tables() -> dict[str, str]:
    shared = change(read("shared"), "verl", 200, "sampled")
    return {
        "changes": changes_table(),
        "spread": spread_table(),
        "solved_share": solved_share_table(),
        "curve_shared": curve_table("shared"),
        "curve_per_role": curve_table("per_role"),
        "times": time_table(),
        "headline": f"verl, shared model, sampled change after 200 steps (one run): {summary_text(shared)}, n = 256 boards",
    }
