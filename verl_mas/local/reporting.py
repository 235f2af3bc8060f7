"""Where a local run's metrics go: metrics.jsonl always (and reading it back), TensorBoard when asked, progress bar or
log, the curve PNG."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from tqdm import tqdm

from verl_mas.data_files import read_jsonl

METRICS_FILE = "metrics.jsonl"
TENSORBOARD_DIR = "tb"


def read_metrics(run_folder: Path) -> list[dict[str, float]]:
    """The rows a run wrote to `run_folder`/metrics.jsonl, in order (`read_jsonl`: a line that is not JSON is named)."""
    return read_jsonl(Path(run_folder) / METRICS_FILE)


class MetricsSink:
    """Writes one row per step; a resumed run rewrites the rows up to its checkpoint, dropping any written after it."""

    def __init__(
        self,
        out: Path,
        history: list[dict[str, float]],
        total_steps: int,
        *,
        tensorboard: bool,
        progress: bool,
        log: Callable[[str], None],
    ) -> None:
        self.log = log
        self.total_steps = total_steps
        self.progress = progress
        self.file = (out / METRICS_FILE).open("w")
        for row in history:
            self.file.write(json.dumps(row) + "\n")
        self.file.flush()
        first_step = int(history[-1]["step"])
        self.writer = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            # purge_step drops events a crashed run logged after its checkpoint; a fresh run logs its step-0 row
            self.writer = SummaryWriter(str(out / TENSORBOARD_DIR), purge_step=first_step + 1 if first_step else None)
            if not first_step:
                self._scalars(history[0])
        evals = [row["eval/success"] for row in history if "eval/success" in row]
        self.last_eval = evals[-1] if evals else None
        self.bar = tqdm(total=total_steps, initial=first_step, desc="train", unit="step", disable=not progress)

    def add(self, row: dict[str, float]) -> None:
        self.file.write(json.dumps(row) + "\n")
        self.file.flush()
        if self.writer is not None:
            self._scalars(row)
        self.last_eval = row.get("eval/success", self.last_eval)
        train_success = row.get("rollout/success", 0.0)
        if self.progress:
            postfix = {"train_success": f"{train_success:.3f}"}
            if self.last_eval is not None:
                postfix["eval_success"] = f"{self.last_eval:.3f}"
            self.bar.set_postfix(postfix, refresh=False)
            self.bar.update(1)
        else:
            shown = f" eval={row['eval/success']:.3f}" if "eval/success" in row else ""
            self.log(f"step {row['step']}/{self.total_steps} train success={train_success:.3f}{shown}")

    def _scalars(self, row: dict[str, float]) -> None:
        step = int(row["step"])
        for key, value in row.items():
            if key != "step":
                self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def close(self) -> None:
        self.bar.close()
        self.file.close()
        if self.writer is not None:
            self.writer.close()


def plot_learning_curve(history: list[dict[str, float]], path: Path) -> None:
    """Training success (tree rollout) and held-out success (greedy, and sampled when measured) against the step."""
    import matplotlib  # here: slow to import, and only the end of a run draws

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    train = [(h["step"], h["rollout/success"]) for h in history if "rollout/success" in h]
    evals = [(h["step"], h["eval/success"]) for h in history if "eval/success" in h]
    if train:
        ax.plot(*zip(*train, strict=True), label="train (tree rollout)", alpha=0.6)
    if evals:
        ax.plot(*zip(*evals, strict=True), marker="o", label="held-out (greedy, K=1)")
    sampled = [(h["step"], h["eval_sampled/success"]) for h in history if "eval_sampled/success" in h]
    if sampled:
        ax.plot(*zip(*sampled, strict=True), marker="s", label="held-out (sampled, K=1)")
    ax.set_xlabel("step")
    ax.set_ylabel("success")
    ax.set_ylim(-0.02, 1.02)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
