"""The LoRA-per-role memory and step-time figures (research/lora_memory/README.md and the results table), from the
records `lora_memory.py` writes: data/lora_memory.json (peak memory per process kind of L2 and L3 launches) and
data/lora_step_time.json (L2 against `shared`, alternating launches)."""

from __future__ import annotations

import json
from pathlib import Path

from verl_mas.stats import markdown_table

DATA = Path(__file__).resolve().parent / "data"
KINDS = ("actor workers", "servers")
ARMS = {"lora_per_role": "L2, one base and an adapter per role", "per_role_lora": "L3, one LoRA policy per role"}


def load(name: str) -> dict:
    return json.loads((DATA / name).read_text())


def ratio(launches: list[dict], roles: int, kind: str, measure: str = "peak_pss_mib") -> float:
    """L2 / L3 of one kind's peak at `roles` roles, from the launches themselves."""
    peak = {launch["arm"]: launch[measure][kind] for launch in launches if launch["roles"] == roles}
    return peak["lora_per_role"] / peak["per_role_lora"]


def memory_table(memory: dict) -> str:
    launches = memory["launches"]
    lines = [["roles", "run", *(f"{kind}, MiB (processes)" for kind in KINDS)]]
    for launch in sorted(launches, key=lambda launch: (launch["roles"], launch["arm"])):
        peaks = [f"{launch['peak_pss_mib'][kind]:.0f} ({launch['processes_at_peak'][kind]})" for kind in KINDS]
        lines.append([str(launch["roles"]), ARMS[launch["arm"]], *peaks])
    for roles in sorted({launch["roles"] for launch in launches}):
        lines.append([str(roles), "L2 / L3", *(f"{ratio(launches, roles, kind):.2f}" for kind in KINDS)])
    return markdown_table(lines) + f"\n\nPeak proportional set size summed per kind ({memory['date']})."


def headline(memory: dict, timing: dict) -> str:
    launches = memory["launches"]
    by_roles = "; ".join(
        f"{roles} roles {' / '.join(f'{ratio(launches, roles, kind):.2f}' for kind in KINDS)}"
        for roles in sorted({launch["roles"] for launch in launches})
    )
    low, high = timing["pair_ratio_range"]
    pairs = timing["arms"]["lora_per_role"]["launches"]
    return (
        f"L2 / L3 peak memory, actor workers / servers: {by_roles}; "
        f"L2 / shared step time {timing['l2_over_shared']:.2f} (pairs {low:.2f}-{high:.2f}), n = {pairs} pairs"
    )


def tables() -> dict[str, str]:
    memory, timing = load("lora_memory.json"), load("lora_step_time.json")
    return {"memory": memory_table(memory), "headline": headline(memory, timing)}
