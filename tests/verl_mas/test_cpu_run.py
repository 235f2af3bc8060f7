"""The CPU launch's command line: the update audit only where the caller asks for it, and what a launch's folder
reads back."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from verl_mas.cpu_run import AUDIT_FILE, LOG_FILE, METRICS_FILE, CpuRun, cpu_command

RECORDER = "verl_mas.verl_engine.hooks.update_record.UpdateRecorder"


def test_the_update_audit_is_switched_on_only_when_asked(tmp_path):
    plain = cpu_command(tmp_path, ["trainer.total_training_steps=1"])
    assert plain[:4] == [sys.executable, "-m", "verl_mas.main", "+platform=cpu"]
    assert not [arg for arg in plain if "trainer_hooks" in arg]
    assert plain[-1] == "trainer.total_training_steps=1"  # the caller's overrides come last, so they win
    audited = cpu_command(tmp_path, ["trainer.total_training_steps=1"], audit=True)
    hooks = [arg for arg in audited if "trainer_hooks" in arg]
    assert hooks == [
        f"+trainer_hooks.update_record._target_={RECORDER}",
        f"+trainer_hooks.update_record.audit={tmp_path / AUDIT_FILE}",
    ]
    assert [arg for arg in audited if arg not in hooks] == plain


def test_a_launch_folder_reads_back_its_log_metrics_and_audit(tmp_path: Path):
    run = CpuRun(tmp_path, returncode=0, wall_s=None)
    assert run.audit() == [] and run.metrics() == []  # a launch without the audit, or killed before an update
    (tmp_path / LOG_FILE).write_text("started\n")
    (tmp_path / METRICS_FILE).write_text(json.dumps({"step": 1, "data": {"a": 1.0}}) + "\n")
    records = [{"step": 1, "policy": "tool", "rows": []}, {"step": 1, "policy": "plan", "rows": []}]
    (tmp_path / AUDIT_FILE).write_text("".join(json.dumps(record) + "\n" for record in records))
    assert run.log() == "started\n"
    assert run.metrics() == [{"step": 1, "data": {"a": 1.0}}]
    assert run.audit() == records
