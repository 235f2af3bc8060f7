"""Sandbox throughput: runs per second of a short program, sequentially and through arun_python.

Each figure is the median of REPEATS measurements, as the machine is often shared; the isolation layers the runs got
(`protections()`) are recorded with them, since each layer adds set-up work to every run.

`--seccomp PAIRS`: the per-run cost of a seccomp-BPF syscall filter (item 8 of issue 27, an evaluation, not a layer
of the sandbox): PAIRS runs of the program alone and with the filter installed at its start (where the bootstrap
would install it, after no_new_privs), alternating in this process; medians, quartiles and their ratio.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import platform
import statistics
import sys
import time

from bench_record import write_record

from verl_mas.sandbox import arun_python, protections, run_python, set_max_concurrency

CODE = "print(sum(range(1000)))"
# x86_64 syscalls a deny-list would refuse with EPERM: ptrace, kexec_load, add_key, request_key, keyctl, mount, umount2,
# pivot_root, chroot, swapon, swapoff, reboot, init_module, delete_module, unshare, perf_event_open, open_by_handle_at,
# setns, process_vm_readv/writev, finit_module, bpf, userfaultfd, io_uring_setup
DENIED = (101, 246, 248, 249, 250, 165, 166, 155, 161, 167, 168, 169, 175, 176, 272, 298, 304, 308, 310, 311, 313, 321,
          323, 425)  # fmt: skip
SECCOMP_PRELUDE = f"""
import ctypes, struct
def _filter(denied):
    ops = [(0x20, 0, 0, 4), (0x15, 1, 0, 0xC000003E), (0x06, 0, 0, 0x80000000), (0x20, 0, 0, 0)]
    ops += [(0x15, len(denied) - i, 0, nr) for i, nr in enumerate(denied)]
    ops += [(0x06, 0, 0, 0x7FFF0000), (0x06, 0, 0, 0x00050001)]
    code = b"".join(struct.pack("HBBI", *op) for op in ops)
    buf = ctypes.create_string_buffer(code)
    prog = struct.pack("HxxxxxxQ", len(ops), ctypes.addressof(buf))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(38, 1, 0, 0, 0)
    if libc.prctl(22, 2, ctypes.c_char_p(prog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "seccomp")
_filter({DENIED!r})
"""
PROBE = "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\nprint(libc.unshare(0x20000), ctypes.get_errno())"
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


def bench_seccomp(pairs: int) -> dict:
    """Per-run wall time of CODE alone and with SECCOMP_PRELUDE, alternating; the filter is checked to refuse."""
    refused = run_python(SECCOMP_PRELUDE + PROBE)
    assert refused.stdout == f"-1 {errno.EPERM}\n", refused
    times: dict[str, list[float]] = {"today": [], "seccomp": []}
    for _ in range(pairs):
        for name, code in (("today", CODE), ("seccomp", SECCOMP_PRELUDE + CODE)):
            start = time.perf_counter()
            assert run_python(code).stdout == EXPECTED
            times[name].append((time.perf_counter() - start) * 1000)
    summary = {name: _quartiles(ms) for name, ms in times.items()}
    summary["ratio_of_medians"] = round(summary["seccomp"]["median"] / summary["today"]["median"], 3)
    return summary


def _quartiles(values: list[float]) -> dict[str, float]:
    low, median, high = statistics.quantiles(values, n=4)
    return {"median": round(median, 1), "q1": round(low, 1), "q3": round(high, 1)}


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--seccomp":
        run_python(CODE)
        summary = bench_seccomp(int(sys.argv[2]))
        record = {"pairs": int(sys.argv[2]), "layers_off": protections().off(), "ms_per_run": summary}
        print(json.dumps(record | {"load_average": os.getloadavg()[0], "platform": platform.platform()}, indent=2))
        return
    run_python(CODE)  # warm the page cache (and detect the layers) before timing
    figures = {"sequential": statistics.median(bench_sequential(RUNS) for _ in range(REPEATS))}
    for concurrency in (2, 4):
        rates = [bench_concurrent(RUNS, concurrency) for _ in range(REPEATS)]
        figures[f"arun_concurrency_{concurrency}"] = statistics.median(rates)
    off = protections().off()
    for name, rate in figures.items():
        print(f"{name:>22}: {rate:7.1f} runs/s")
    record = {
        "program": CODE,
        "runs_per_measurement": RUNS,
        "measurements_per_figure": REPEATS,
        "layers_off": off,
        "runs_per_second": {k: round(v, 1) for k, v in figures.items()},
        "as_root": os.geteuid() == 0,
    }
    write_record("sandbox", record)


if __name__ == "__main__":
    main()
