"""`learning.py` with a KL penalty to each run's starting model (its warm start), for `update.use_kl_loss=true`.

The local engine's `PolicyTrainer.step` takes the reference log-probs as an argument, but `LocalRun` passes none, so
`update.use_kl_loss=true` alone stops a run at its first update ("use_kl_loss needs ref_logprobs"). This script
freezes a copy of every policy's model as the run builds it (from `model.path`, or the warm start it trains), and
passes that copy's log-probs of each update's samples to the update; `update.kl_coef` and `update.kl_type` then
apply as in verl. Whole models only (`lora.rank=0`). Arguments are `learning.py`'s:

    OMP_NUM_THREADS=1 .venv/bin/python experiments/kl_reference.py --envs sokoban --methods at_grpo_shared \
        --steps 60 --out runs/sokoban_fix/kl model.path=... update.use_kl_loss=true update.kl_coef=0.1
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import learning  # noqa: E402  (the harness this experiment runs on, in the same folder)

from verl_mas.local import train as local_train  # noqa: E402
from verl_mas.local.update import PolicyTrainer  # noqa: E402


def with_reference(trainer: PolicyTrainer) -> None:
    """Make `trainer.step` pass the log-probs of a frozen copy of its model as it is now."""
    if trainer.adapter_name is not None:
        raise ValueError("kl_reference: LoRA adapters are not supported (lora.rank=0 only)")
    reference = PolicyTrainer(copy.deepcopy(trainer.model), trainer.config)
    step = trainer.step

    def step_with_reference(tensors, advantages, ref_logprobs=None):
        return step(tensors, advantages, reference.compute_logprobs(tensors))

    trainer.step = step_with_reference


def install() -> None:
    """Every LocalRun built from now on whose config asks for the KL loss gets its reference models."""
    build = local_train.LocalRun.__init__

    def build_with_reference(run, config, *args, **kwargs):
        build(run, config, *args, **kwargs)
        if config.update.use_kl_loss:
            for trainer in run.trainers.values():
                with_reference(trainer)

    local_train.LocalRun.__init__ = build_with_reference


if __name__ == "__main__":
    install()
    learning.main(sys.argv[1:], command=["python", "experiments/kl_reference.py", *sys.argv[1:]])
