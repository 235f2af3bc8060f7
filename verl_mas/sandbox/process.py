"""Owns the sandboxed child's process control: feeding and reading its pipes, its private uid, killing what it left."""

from __future__ import annotations

import os
import random
import re
import selectors
import signal
import subprocess
import time

# Random per-run uids from a range no real account uses, so concurrent runs cannot signal each
# other and "every process of this uid" means exactly this run's processes.
UID_BASE = 1 << 30
UID_SPAN = 1 << 28
# Drawn from the OS, not from the `random` module: training runs seed that, and two runs of one seed would then draw
# the same uids, so each run's uid sweep would kill the other's programs.
_UID_SOURCE = random.SystemRandom()
_POLL_S = 0.05  # only used where pidfd_open is unavailable


def communicate(
    proc: subprocess.Popen, data: bytes, deadline: float, cap: int, uid: int | None
) -> tuple[bytes, bytes, bool, bool]:
    """Feed stdin and collect capped output until the child has exited and its pipes are closed.

    Returns (stdout, stderr, timed_out, truncated). When the child exits, its group is killed at
    once, so grandchildren holding the pipes open cannot stretch the run to the deadline.
    """
    assert proc.stdin and proc.stdout and proc.stderr
    bufs = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}
    sel = selectors.DefaultSelector()
    for fd in bufs:
        sel.register(fd, selectors.EVENT_READ)
    stdin_fd, sent = proc.stdin.fileno(), 0
    if data:
        os.set_blocking(stdin_fd, False)
        sel.register(stdin_fd, selectors.EVENT_WRITE)
    else:
        proc.stdin.close()
    try:
        pidfd: int | None = os.pidfd_open(proc.pid)
        sel.register(pidfd, selectors.EVENT_READ)
    except (AttributeError, OSError):
        pidfd = None
    open_outputs, exited = len(bufs), False
    try:
        while True:
            if not exited and pidfd is None:
                exited = _has_exited(proc.pid)
                if exited:
                    kill_all(proc.pid, uid)
            if exited and open_outputs == 0:
                return bytes(bufs[proc.stdout.fileno()]), bytes(bufs[proc.stderr.fileno()]), False, False
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            for key, _ in sel.select(remaining if pidfd is not None else min(remaining, _POLL_S)):
                fd = key.fd
                if fd == pidfd:
                    sel.unregister(fd)
                    exited = True
                    kill_all(proc.pid, uid)
                elif fd == stdin_fd:
                    try:
                        sent += os.write(fd, data[sent : sent + 65536])
                    except BrokenPipeError:
                        sent = len(data)
                    if sent >= len(data):
                        sel.unregister(fd)
                        proc.stdin.close()
                else:
                    chunk = os.read(fd, 65536)
                    if not chunk:
                        sel.unregister(fd)
                        open_outputs -= 1
                        continue
                    buf = bufs[fd]
                    room = cap - len(buf)
                    buf += chunk[:room]
                    if len(chunk) > room:
                        # A program printing past the cap is killed rather than drained until the deadline.
                        return bytes(bufs[proc.stdout.fileno()]), bytes(bufs[proc.stderr.fileno()]), False, True
        return bytes(bufs[proc.stdout.fileno()]), bytes(bufs[proc.stderr.fileno()]), True, False
    finally:
        sel.close()
        if pidfd is not None:
            os.close(pidfd)


def _has_exited(pid: int) -> bool:
    """Exit check that leaves the child a zombie, so its pgid stays reserved for `kill_all`."""
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def kill_all(pgid: int, uid: int | None) -> None:
    """SIGKILL the child's process group and, with a private uid, every live process of that uid.

    The uid sweep catches processes that escaped the group with setsid(); RLIMIT_NPROC bounds how
    many there can be, so repeating until none is found terminates.
    """
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if uid is None:
        return
    for _ in range(200):
        pids = _live_pids_of_uid(uid)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.001)


def _live_pids_of_uid(uid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status", encoding="ascii", errors="replace") as f:
                status = f.read()
        except OSError:
            continue
        state = re.search(r"^State:\s+(\S)", status, re.M)
        uids = re.search(r"^Uid:\s+(.*)$", status, re.M)
        if state and uids and state.group(1) not in "ZX" and str(uid) in uids.group(1).split():
            found.append(int(entry))
    return found


def pick_uid() -> int:
    return UID_BASE + _UID_SOURCE.randrange(UID_SPAN)
