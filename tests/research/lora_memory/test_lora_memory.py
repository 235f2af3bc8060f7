"""research.lora_memory: its records land beside the page (data/), and a rerun replaces only the launches it reruns."""

from __future__ import annotations

import json

from research.lora_memory import lora_memory


def test_a_record_is_written_to_the_studys_data_and_a_rerun_keeps_the_other_launches(tmp_path, monkeypatch):
    monkeypatch.setattr(lora_memory, "DATA", tmp_path)
    monkeypatch.setattr(lora_memory.sys, "argv", ["lora_memory.py", "memory", "--roles", "2"])
    launches = [{"roles": 2, "arm": lora_memory.L2, "mib": 1.0}, {"roles": 3, "arm": lora_memory.L3, "mib": 2.0}]
    path = lora_memory.record("lora_memory", {"launches": launches}, complete=True)
    written = json.loads(path.read_text())
    assert path == tmp_path / "lora_memory.json"
    assert written["command"] == "python -m research.lora_memory memory --roles 2" and written["complete"] is True
    assert written["launches"] == launches and {"cpus", "load_average", "python", "platform"} <= written.keys()
    assert lora_memory.kept_launches({(2, lora_memory.L2)}) == launches[1:]
