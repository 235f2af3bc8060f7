"""verl's stack against the local engine on CPU (research/verl_learning/README.md), from data/shared.json,
data/per_role.json and data/lora_per_role.json (L2): every change is paired per board over the same 256 held-out
boards."""

from __future__ import annotations

import json
import math
from pathlib import Path

from research.stats import difference_summary, markdown_table, number, summary_text

DATA = Path(__file__).resolve().parent / "data"
ROUTERS = ("shared", "per_role", "lora_per_role")
GAINED = ("shared", "per_role")  # the routers whose verl run gained: where its gain came from is a question
PILOT = "lora_per_role_pilot_seed3"  # L2's second design: the local pilot that chooses a regime that learns
SELECTABLE_LRS = (1e-3, 3e-3)  # the pilot's arms the selection rule chooses among, smaller first (3e-4: reference)


def read(router: str) -> dict:
    return json.loads((DATA / f"{router}.json").read_text())


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
    return markdown_table(lines) + "\n\nOne run per engine and router (`lora_per_role`: L2); n = 256 boards per change."


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


def solved_share_table() -> str:
    """How much of verl's sampled gain comes from boards the warm start already solved greedily."""
    lines = [["router", "steps", "sampled gain", "of it on boards solved greedily before RL", "share"]]
    for router in GAINED:
        record = read(router)
        last = last_common_step(record)
        before_greedy = per_board(record, "verl", 0, "greedy")
        gains = [
            a - b
            for a, b in zip(
                per_board(record, "verl", last, "sampled"), per_board(record, "verl", 0, "sampled"), strict=True
            )
        ]
        total = sum(gains) / len(gains)
        on_solved = sum(g for g, solved in zip(gains, before_greedy, strict=True) if solved) / len(gains)
        lines.append(
            [
                f"`{router}`",
                str(last),
                number(total, signed=True),
                number(on_solved, signed=True),
                f"{on_solved / total:.2f}",
            ]
        )
    return markdown_table(lines)


def curve_table(router: str) -> str:
    record = read(router)
    lines = [["step", *map(str, record["steps"])]]
    for name, curve in record["curves"].items():
        for mode in ("sampled", "greedy"):
            missing = ["-"] * (len(record["steps"]) - len(curve[mode]))  # a run stopped early: its last steps
            lines.append([f"{name}, {mode}", *map(number, curve[mode]), *missing])
    return markdown_table(lines)


def pilot_as_record() -> dict:
    """The pilot's arms in the shape of an engine comparison's record (an arm where an engine would be), so that
    `change` reads them."""
    pilot = read(PILOT)
    return {
        "board_results": {name: arm["board_results"] for name, arm in pilot["arms"].items()},
        "sampled_episodes_per_board": pilot["sampled_episodes_per_board"],
        "arms": pilot["arms"],
        "budget": pilot["steps"],
        "seed": pilot["seed"],
    }


def z(summary: dict) -> float:
    """Change / SE; where every board changed alike (SE 0), 0 for no change and infinite in its direction otherwise."""
    mean, se = summary["mean"], summary["se"]
    return mean / se if se else math.copysign(math.inf, mean) if mean else 0.0


def pilot_choice(record: dict) -> str | None:
    """The selection rule set before the pilot: the arm of the smaller lr of SELECTABLE_LRS whose sampled change at the
    budget has z > 2 and whose greedy change has z > -2; None when neither has. Raises when an arm the rule needs was
    not run (its choice is open)."""
    by_lr = {arm["lr"]: name for name, arm in record["arms"].items()}
    for lr in SELECTABLE_LRS:
        if lr not in by_lr:
            raise LookupError(f"lr {lr:g} was not run: the rule's choice is open")
        sampled, greedy = (change(record, by_lr[lr], record["budget"], mode) for mode in ("sampled", "greedy"))
        if z(sampled) > 2 and z(greedy) > -2:
            return by_lr[lr]
    return None


def pilot_table() -> str:
    record = pilot_as_record()
    lines = [["arm", "sampled change (SE) [95%]", "z", "greedy change (SE) [95%]", "z", "base change"]]
    for name, arm in record["arms"].items():
        cells = []
        for mode in ("sampled", "greedy"):
            summary = change(record, name, record["budget"], mode)
            cells += [summary_text(summary), f"{z(summary):+.1f}"]
        chosen = "" if arm["lr"] in SELECTABLE_LRS else " (reference)"
        lines.append([f"lr {arm['lr']:g}, rank {arm['rank']}{chosen}", *cells, f"{arm['base_change_max']:g}"])
    try:
        choice = pilot_choice(record)
        verdict = f"chosen by the rule: **{choice}**" if choice else "**no arm meets the rule: no regime tried learns**"
    except LookupError as open_choice:
        verdict = f"**{open_choice}**"
    return (
        markdown_table(lines)
        + f"\n\nLocal engine, seed {record['seed']}, change from step 0 at step {record['budget']}, paired per "
        f"board (n = 256); one run per arm; {verdict}."
    )


def pilot_curve_table() -> str:
    pilot = read(PILOT)
    steps = sorted({int(step) for arm in pilot["arms"].values() for step in arm["board_results"]})
    record = pilot_as_record()
    lines = [["step", *map(str, steps)]]
    for name in pilot["arms"]:
        for mode in ("sampled", "greedy"):
            readings = [per_board(record, name, step, mode) for step in steps]
            lines.append([f"{name}, {mode}", *(number(sum(r) / len(r)) for r in readings)])
    return markdown_table(lines)


def l2_validity_table() -> str:
    """L2's checks: the base frozen in both engines, verl's sampler-vs-actor gaps per adapter under the guard's
    bound."""
    validity = read("lora_per_role")["validity"]
    lines = [["check", "local", "verl"]]
    changes = validity["base_change_max"]
    lines.append(
        [
            "largest base-weight change from the warm start, last checkpoint",
            *(f"{changes[e]:g}" for e in ("local", "verl")),
        ]
    )
    gaps = ", ".join(f"{role} {gap:.1e}" for role, gap in sorted(validity["logprob_gap_max"].items()))
    lines.append(["guard's sampler-vs-actor gap per adapter, largest over steps (bound 0.1)", "-", gaps])
    low, high = validity["rollout_probs_diff_max"]
    lines.append(
        ["verl's `rollout_probs_diff_max` over steps and adapters (min - max)", "-", f"{low:.1e} - {high:.1e}"]
    )
    return markdown_table(lines)


def time_table() -> str:
    lines = [["router", "engine", "generation", "old log-prob", "update", "step"]]
    for router in ROUTERS:
        for engine, times in read(router)["step_s"].items():
            cells = [
                "(in update)" if times[k] is None else f"{times[k]:.2f}"
                for k in ("generation", "old_log_prob", "update", "step")
            ]
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
        "curve_lora_per_role": curve_table("lora_per_role"),
        "l2_validity": l2_validity_table(),
        "l2_pilot": pilot_table(),
        "l2_pilot_curve": pilot_curve_table(),
        "times": time_table(),
        "headline": "verl, shared model, sampled change after 200 steps (one run): "
        f"{summary_text(shared)}, n = 256 boards",
        "l2_headline": l2_headline(),
    }


def l2_headline() -> str:
    """L2 at its budget: verl minus local, sampled and greedy, and each engine's sampled change (one run each)."""
    record = read("lora_per_role")
    last = last_common_step(record)
    gaps = ", ".join(f"{mode} {summary_text(verl_minus_local(record, last, mode))}" for mode in ("sampled", "greedy"))
    gains = ", ".join(
        f"{engine} {summary_text(change(record, engine, last, 'sampled'))}" for engine in ("verl", "local")
    )
    return f"L2, verl minus local after {last} steps: {gaps}; sampled change {gains}; n = 256 boards, one run each"
