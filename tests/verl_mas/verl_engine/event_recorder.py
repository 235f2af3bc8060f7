"""A trainer hook for the CPU-stack test: every event it receives, appended to a JSONL file (event, step, each
policy's row count). The test copies this file into the launch's folder, the driver's working directory, which Ray
puts on its workers' import path."""

from __future__ import annotations

import json

from verl_mas.verl_engine.hooks import TrainerHook


class EventRecorder(TrainerHook):
    def __init__(self, path: str):
        self.path = path

    def _record(self, event: str, trainer, parts) -> None:
        with open(self.path, "a", encoding="utf-8") as out:
            rows = {policy: len(part) for policy, part in parts.items()}
            out.write(json.dumps({"event": event, "step": trainer.global_steps, "rows": rows}) + "\n")

    def before_log_probs(self, trainer, parts) -> None:
        self._record("before_log_probs", trainer, parts)

    def after_log_probs(self, trainer, parts) -> None:
        self._record("after_log_probs", trainer, parts)

    def before_update(self, trainer, parts) -> None:
        self._record("before_update", trainer, parts)

    def after_update(self, trainer, parts) -> None:
        self._record("after_update", trainer, parts)
