"""Math grading throughput: calls per second through the worker pool versus a direct math-verify call in this process.

Every call compares a pair no cache has seen (the pairs are numbered, and the pool remembers one verdict only), so
each figure is math-verify's work plus, for the pool, the round trip to a worker process. Rounds alternate the
three ways (direct on the main thread, where math-verify's alarms work; the pool from one thread; the pool from
`cpu_count` threads with as many workers) so load from elsewhere on the machine falls on all of them alike; each
figure is the median over rounds, with the lowest and highest.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from bench_record import write_record
from math_verify import LatexExtractionConfig, parse, verify

from verl_mas_envs.math.verify_pool import GradingPool, PoolSettings

CALLS = 60
ROUNDS = 5
TIMEOUT_S = 2  # math-verify's own timeouts, in both ways
DEADLINE_S = 5.0


def pairs(start: int, count: int) -> list[tuple[str, str]]:
    """`count` boxed (gold, answer) pairs numbered from `start`: fractions, sets, intervals, polynomials."""
    made = []
    for n in range(start, start + count):
        made += [
            (f"\\boxed{{\\frac{{{n}}}{{{n + 1}}}}}", f"\\boxed{{\\frac{{{2 * n}}}{{{2 * n + 2}}}}}"),
            (f"\\boxed{{\\{{{n}, {n + 2}\\}}}}", f"\\boxed{{\\{{{n + 2}, {n}\\}}}}"),
            (f"\\boxed{{[{n}, {n + 5})}}", f"\\boxed{{[{n},{n + 5}]}}"),
            (f"\\boxed{{(x+{n})^2}}", f"\\boxed{{x^2+{2 * n}x+{n * n}}}"),
        ]
    return made[:count]


def direct(batch: list[tuple[str, str]]) -> list[bool]:
    config = [LatexExtractionConfig(boxed_match_priority=0)]
    return [
        verify(parse(g, config, parsing_timeout=TIMEOUT_S), parse(a, config, parsing_timeout=TIMEOUT_S),
               timeout_seconds=TIMEOUT_S)
        for g, a in batch
    ]  # fmt: skip


def through(pool: GradingPool, threads: int) -> Callable[[list[tuple[str, str]]], list[bool]]:
    def run(batch: list[tuple[str, str]]) -> list[bool]:
        with ThreadPoolExecutor(threads) as executor:
            return [v == "equal" for v in executor.map(lambda pair: pool.verify(*pair, DEADLINE_S), batch)]

    return run


def rate(way: Callable[[list[tuple[str, str]]], list[bool]], batch: list[tuple[str, str]]) -> tuple[float, list[bool]]:
    started = time.perf_counter()
    verdicts = way(batch)
    return len(batch) / (time.perf_counter() - started), verdicts


def main() -> None:
    cpus = os.cpu_count() or 1
    settings = PoolSettings(verify_timeout_s=TIMEOUT_S, cache_size=1)
    single, parallel = GradingPool(settings), GradingPool(PoolSettings(**{**settings.__dict__, "workers": cpus}))
    ways = {"direct": direct, "pool_1_thread": through(single, 1), f"pool_{cpus}_threads": through(parallel, cpus)}
    warm = pairs(10**6, cpus * 2)  # start the workers and import math-verify here before timing
    for way in ways.values():
        way(warm)
    rates: dict[str, list[float]] = {name: [] for name in ways}
    for round_ in range(ROUNDS):
        for index, (name, way) in enumerate(ways.items()):
            batch = pairs((round_ * len(ways) + index) * CALLS, CALLS)
            per_second, verdicts = rate(way, batch)
            expected = [i % 4 != 2 for i in range(len(batch))]  # [n, n+5) is not [n, n+5]
            assert verdicts == expected, (name, verdicts)
            rates[name].append(per_second)
    single.close()
    parallel.close()
    figures = {
        name: {"median": round(statistics.median(r), 1), "min": round(min(r), 1), "max": round(max(r), 1)}
        for name, r in rates.items()
    }
    base = figures["direct"]["median"]
    print(f"grading calls per second ({CALLS} calls x {ROUNDS} alternating rounds; median [min, max])")
    for name, figure in figures.items():
        spread = f"[{figure['min']:.1f}, {figure['max']:.1f}]"
        print(f"{name:>16}: {figure['median']:7.1f} {spread:>14}   x{figure['median'] / base:.2f} of direct")
    write_record("math_grading", {"calls_per_round": CALLS, "rounds": ROUNDS, "calls_per_second": figures})


if __name__ == "__main__":
    main()
