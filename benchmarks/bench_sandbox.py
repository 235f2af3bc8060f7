"""Sandbox throughput: runs per second of a short program, sequentially and through arun_python.

Each figure is the median of REPEATS measurements, as the machine is often shared; the isolation layers the runs got
(`protections()`) are recorded with them, since each layer adds set-up work to every run.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

from verl_mas.sandbox import arun_python, protections, run_python, set_max_concurrency

CODE = "print(sum(range(1000)))"
EXPECTED = "499500\n"
RUNS = 40
REPEATS = 3


def bench_sequential(runs: int) -> float:
    start = time.perf_counter()
    for _ in range(runs):
        assert run_python(CODE).stdout == EXPECTED
    return runs / (time.perf_counter() - start)


def bench_concurrent(runs: int, concurrency: int) -> float:
    set_max_concurrency(concurrency)

    async def main() -> None:
        results = await asyncio.gather(*(arun_python(CODE) for _ in range(runs)))
        assert all(r.stdout == EXPECTED for r in results)

    start = time.perf_counter()
    asyncio.run(main())
    return runs / (time.perf_counter() - start)


def main() -> None:
    run_python(CODE)  # warm the page cache (and detect the layers) before timing
    figures = {"sequential": statistics.median(bench_sequential(RUNS) for _ in range(REPEATS))}
    for concurrency in (2, 4):
        rates = [bench_concurrent(RUNS, concurrency) for _ in range(REPEATS)]
        figures[f"arun_concurrency_{concurrency}"] = statistics.median(rates)
    off = protections().off()
    for name, rate in figures.items():
        print(f"{name:>22}: {rate:7.1f} runs/s")
    out = Path(__file__).parent / "results" / "sandbox.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "program": CODE,
                "runs_per_measurement": RUNS,
                "measurements_per_figure": REPEATS,
                "layers_off": off,
                "runs_per_second": {k: round(v, 1) for k, v in figures.items()},
                "cpus": os.cpu_count(),
                "as_root": os.geteuid() == 0,
                "python": sys.version.split()[0],
                "platform": platform.platform(),
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
