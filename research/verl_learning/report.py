"""The saved results in the terminal (`print_report`) and as the page's chart (`plot`)."""

from __future__ import annotations

import json
from pathlib import Path

from research.verl_learning.readings import or_dash
from research.verl_learning.settings import ENGINES

CHART = Path(__file__).resolve().parent / "data" / "verl_learning.png"


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
