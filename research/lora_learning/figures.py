"""L2 (one base model, one LoRA adapter per role) through verl's stack and the local engine on CPU
(research/lora_learning/README.md), from data/lora_per_role.json (the first design's runs) and the local pilots'
data/lora_per_role_pilot_seed3*.json: every change is paired per board over the same 256 held-out boards."""

from __future__ import annotations

import json
import math
from pathlib import Path

from research.verl_learning.figures import (
    TIME_HEADER,
    change,
    curve_rows,
    last_common_step,
    per_board,
    time_rows,
    verl_minus_local,
)
from verl_mas.local.config import LoraSpec
from verl_mas.stats import markdown_table, number, summary_text

DATA = Path(__file__).resolve().parent / "data"
ROUTER = "lora_per_role"
PILOT = "lora_per_role_pilot_seed3"  # L2's second design: the local pilot that chooses a regime that learns
SELECTABLE_LRS = (1e-3, 3e-3)  # the pilot's arms the selection rule chooses among, smaller first (3e-4: reference)
PILOT3 = "lora_per_role_pilot_seed3_steps200"  # L2's third design: the same pilot at 200 steps
PILOT3_LRS = (3e-4, 1e-3)  # its rule's arms, smaller first (no reference arm)
ATTENTION = LoraSpec().target_modules  # the modules the preset adapts (attention's projections)
MLP_TARGETS = (*ATTENTION, "gate_proj", "up_proj", "down_proj")
PILOT4 = "lora_per_role_pilot_seed3_steps200_targets-" + "-".join(MLP_TARGETS)  # L2's fourth design: the MLP too
PILOT4_LRS = (1e-3,)


def read(name: str) -> dict:
    return json.loads((DATA / f"{name}.json").read_text())


def changes_table() -> str:
    """Each engine's change from step 0 where both engines have a reading last, and verl minus local there."""
    record = read(ROUTER)
    last = last_common_step(record)
    lines = [["engine", "steps", "sampled (SE) [95%]", "greedy (SE) [95%]"]]
    for engine in ("local", "verl"):
        lines.append(
            [engine, str(last), *(summary_text(change(record, engine, last, m)) for m in ("sampled", "greedy"))]
        )
    lines.append(
        ["verl - local", str(last), *(summary_text(verl_minus_local(record, last, m)) for m in ("sampled", "greedy"))]
    )
    return (
        markdown_table(lines)
        + "\n\nChange from the warm start per engine, and verl minus local; seed 0, one run per engine; n = 256 boards."
    )


def pilot_as_record(name: str = PILOT) -> dict:
    """The pilot's arms in the shape of an engine comparison's record (an arm where an engine would be), so that
    `change` reads them."""
    pilot = read(name)
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


def pilot_choice(record: dict, selectable: tuple[float, ...] = SELECTABLE_LRS) -> str | None:
    """The selection rule set before the pilot: the arm of the smaller lr of `selectable` whose sampled change at the
    budget has z > 2 and whose greedy change has z > -2; None when neither has. Raises when an arm the rule needs was
    not run (its choice is open)."""
    by_lr = {arm["lr"]: name for name, arm in record["arms"].items()}
    for lr in selectable:
        if lr not in by_lr:
            raise LookupError(f"lr {lr:g} was not run: the rule's choice is open")
        sampled, greedy = (change(record, by_lr[lr], record["budget"], mode) for mode in ("sampled", "greedy"))
        if z(sampled) > 2 and z(greedy) > -2:
            return by_lr[lr]
    return None


def pilot_table(name: str = PILOT, selectable: tuple[float, ...] = SELECTABLE_LRS) -> str:
    record = pilot_as_record(name)
    lines = [["arm", "sampled change (SE) [95%]", "z", "greedy change (SE) [95%]", "z", "base change"]]
    for arm_name, arm in record["arms"].items():
        cells = []
        for mode in ("sampled", "greedy"):
            summary = change(record, arm_name, record["budget"], mode)
            cells += [summary_text(summary), f"{z(summary):+.1f}"]
        chosen = "" if arm["lr"] in selectable else " (reference)"
        lines.append([f"{arm_label(arm)}{chosen}", *cells, f"{arm['base_change_max']:g}"])
    try:
        choice = pilot_choice(record, selectable)
        verdict = f"chosen by the rule: **{choice}**" if choice else "**no arm meets the rule: no regime tried learns**"
    except LookupError as open_choice:
        verdict = f"**{open_choice}**"
    return (
        markdown_table(lines)
        + f"\n\nLocal engine, seed {record['seed']}, change from step 0 at step {record['budget']}, paired per "
        f"board (n = 256); one run per arm; {verdict}."
    )


def arm_label(arm: dict) -> str:
    """An arm's lr and rank, and its adapted modules where they are not the preset's (records before the fourth
    design name none: the preset's)."""
    modules = tuple(arm.get("target_modules", ATTENTION))
    return f"lr {arm['lr']:g}, rank {arm['rank']}" + ("" if modules == ATTENTION else f", {' '.join(modules)}")


def same_start_table(later: str, earlier: str) -> str:
    """How many boards read otherwise at step 0 in pilot record `later` than in `earlier`, greedy/sampled: 0/0 when
    both read the same warm start with adapters at zero."""
    first = next(iter(read(earlier)["arms"].values()))["board_results"]["0"]
    lines = [["arm", f"boards at step 0 that read otherwise than {earlier}'s, greedy/sampled"]]
    for arm in read(later)["arms"].values():
        start = arm["board_results"]["0"]
        differ = [sum(a != b for a, b in zip(start[m], first[m], strict=True)) for m in ("greedy", "sampled")]
        lines.append([arm_label(arm), "/".join(map(str, differ))])
    return markdown_table(lines)


def pilot_curve_table(name: str = PILOT) -> str:
    pilot = read(name)
    steps = sorted({int(step) for arm in pilot["arms"].values() for step in arm["board_results"]})
    record = pilot_as_record(name)
    lines = [["step", *map(str, steps)]]
    for arm in pilot["arms"]:
        for mode in ("sampled", "greedy"):
            readings = [per_board(record, arm, step, mode) for step in steps]
            lines.append([f"{arm_label(pilot['arms'][arm])}, {mode}", *(number(sum(r) / len(r)) for r in readings)])
    return markdown_table(lines)


def repeat_differences(later: dict, earlier: dict) -> dict[str, dict[int, str]]:
    """Per arm of pilot record `later` that `earlier` ran at the same lr and rank: for each step both read, how many
    boards read otherwise, "greedy/sampled" (0/0: the same computation repeated)."""
    by_setting = {(arm["lr"], arm["rank"]): arm for arm in earlier["arms"].values()}
    out = {}
    for name, arm in later["arms"].items():
        before = by_setting.get((arm["lr"], arm["rank"]))
        if before is None:
            continue
        steps = sorted({int(step) for step in arm["board_results"]} & {int(step) for step in before["board_results"]})
        out[name] = {
            step: "/".join(
                str(
                    sum(
                        a != b
                        for a, b in zip(
                            arm["board_results"][str(step)][mode], before["board_results"][str(step)][mode], strict=True
                        )
                    )
                )
                for mode in ("greedy", "sampled")
            )
            for step in steps
        }
    return out


def pilot3_repeat_table() -> str:
    found = repeat_differences(read(PILOT3), read(PILOT))
    steps = sorted({step for by_step in found.values() for step in by_step})
    lines = [["arm (boards that read otherwise than the second design's, greedy/sampled)", *map(str, steps)]]
    lines += [[name, *(by_step.get(step, "-") for step in steps)] for name, by_step in found.items()]
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
    return markdown_table([TIME_HEADER, *time_rows(ROUTER, read(ROUTER)["step_s"])])


def tables() -> dict[str, str]:
    return {
        "l2_changes": changes_table(),
        "curve_lora_per_role": curve_rows(read(ROUTER)),
        "l2_validity": l2_validity_table(),
        "l2_times": time_table(),
        "l2_pilot": pilot_table(),
        "l2_pilot_curve": pilot_curve_table(),
        # L2's third design: its tables once its pilot has a record
        **(
            {
                "l2_pilot3": pilot_table(PILOT3, PILOT3_LRS),
                "l2_pilot3_curve": pilot_curve_table(PILOT3),
                "l2_pilot3_repeat": pilot3_repeat_table(),
            }
            if (DATA / f"{PILOT3}.json").exists()
            else {}
        ),
        # L2's fourth design: its tables once its pilot has a record
        **(
            {
                "l2_pilot4": pilot_table(PILOT4, PILOT4_LRS),
                "l2_pilot4_curve": pilot_curve_table(PILOT4),
                "l2_pilot4_start": same_start_table(PILOT4, PILOT3),
            }
            if (DATA / f"{PILOT4}.json").exists() and (DATA / f"{PILOT3}.json").exists()
            else {}
        ),
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
