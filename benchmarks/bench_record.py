"""Owns a benchmark's results file: its figures beside the machine they were measured on."""

from __future__ import annotations

import json
import os
import platform
import sys
from pathlib import Path
from typing import Any


def write_record(name: str, figures: dict[str, Any]) -> Path:
    """Write `figures` with the machine's cpus, load, Python and platform to benchmarks/results/NAME.json."""
    out = Path(__file__).parent / "results" / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    machine = {
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
    }
    out.write_text(json.dumps(figures | machine, indent=2) + "\n")
    print(f"wrote {out}")
    return out
