"""Test kit: what a test's own sandbox runs left on the host (processes, SysV objects), by the uids they drew.

Only the uids drawn inside the test count: another test's runs (another pytest-xdist worker's, say) hold other
sandbox uids at the same moment, and their live processes are not this test's survivors.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from verl_mas.sandbox import runner


@contextmanager
def drawn_uids(into: set[int] | None = None) -> Iterator[set[int]]:
    """Collect every private uid the sandbox draws for a run started inside the block."""
    uids = into if into is not None else set()
    draw = runner.pick_uid

    def recorded() -> int:
        uid = draw()
        uids.add(uid)
        return uid

    runner.pick_uid = recorded
    try:
        yield uids
    finally:
        runner.pick_uid = draw


def survivors(marker: str, uids: set[int]) -> list[int]:
    """Live (not zombie) processes named `marker` or running under one of `uids`."""
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            comm = Path(f"/proc/{entry}/comm").read_text().strip()
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        uid = int(status.split("\nUid:\t", 1)[1].split()[0])
        zombie = "\nState:\tZ" in status
        if not zombie and (comm == marker or uid in uids):
            found.append(int(entry))
    return found


def sysv_objects(uids: set[int]) -> dict[str, int]:
    """SysV shared memory, semaphores and message queues on the host owned by one of `uids`."""
    counts = {}
    for kind in ("shm", "sem", "msg"):
        header, *rows = Path(f"/proc/sysvipc/{kind}").read_text().splitlines()
        column = header.split().index("uid")
        counts[kind] = sum(int(row.split()[column]) in uids for row in rows)
    return counts
