"""Owns running math-verify: a pool of worker processes, each call bounded by a hard deadline.

math-verify's own timeouts use `signal.alarm`, which only works on a process's main thread (environment steps run
in worker threads) and cannot interrupt long C-level arithmetic. So every comparison runs in a worker process
(`verl_mas_envs.math.verify_worker`, a fresh interpreter started with `-m`, so the parent's `__main__` is never
re-imported), and a worker that overruns the deadline is killed; the next call starts a replacement. An overrun
costs at most the deadline and counts as "not equal"; nothing hangs. Results are cached per pool, timeouts
included, so the same pair always gets the same verdict in one process (environment steps must be deterministic).
"""

from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Literal

Verdict = Literal["equal", "different", "timeout", "error"]
_REPLIES: dict[str, Verdict] = {"1": "equal", "0": "different", "e": "error"}


@dataclass(frozen=True)
class PoolSettings:
    """How a grading pool runs.

    Attributes:
        workers: worker processes at most (started when first needed).
        verify_timeout_s: math-verify's own per-operation timeout inside a worker (whole seconds: signal.alarm).
        memory_mb: address-space limit of each worker.
        start_timeout_s: how long a worker may take to start (import sympy and math-verify) on a loaded machine.
        cache_size: verdicts remembered.
    """

    workers: int = 2
    verify_timeout_s: int = 2
    memory_mb: int = 2048
    start_timeout_s: float = 120.0
    cache_size: int = 8192

    def __post_init__(self) -> None:
        for name in ("workers", "verify_timeout_s", "memory_mb", "start_timeout_s", "cache_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ValueError(f"PoolSettings.{name} must be a positive number, got {value!r}")


class _Worker:
    """One worker process and the unread part of its replies."""

    def __init__(self, settings: PoolSettings) -> None:
        command = [sys.executable, "-m", "verl_mas_envs.math.verify_worker", str(settings.verify_timeout_s),
                   str(settings.memory_mb)]  # fmt: skip
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True
        )
        self._buffer = b""
        ready = self.read_line(time.monotonic() + settings.start_timeout_s)
        if ready != "ready":
            self.kill()
            why = ready or f"no reply within {settings.start_timeout_s} s"
            raise RuntimeError(f"the math-verify worker did not start: {why} (is math-verify installed?)")

    def ask(self, gold: str, answer: str, deadline_s: float) -> Verdict | None:
        """The worker's verdict, or None if it did not reply within `deadline_s` (or died)."""
        try:
            self.process.stdin.write(json.dumps([gold, answer]).encode() + b"\n")
            self.process.stdin.flush()
        except OSError:  # it died since its last reply
            return None
        return _REPLIES.get(self.read_line(time.monotonic() + deadline_s) or "")

    def read_line(self, deadline: float) -> str | None:
        fd = self.process.stdout.fileno()
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                return None
            chunk = os.read(fd, 4096)
            if not chunk:
                return None
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode(errors="replace")

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            stream.close()


class GradingPool:
    """Compare (gold, answer) LaTeX pairs with math-verify in worker processes; thread-safe."""

    def __init__(self, settings: PoolSettings | None = None) -> None:
        self.settings = settings or PoolSettings()
        self._idle: list[_Worker] = []
        self._live = 0
        self._closed = False
        self._lock = threading.Condition()
        self._cache: OrderedDict[tuple[str, str, float], Verdict] = OrderedDict()
        #: workers killed for overrunning their deadline (or dying), over the pool's life
        self.killed = 0

    def verify(self, gold: str, answer: str, deadline_s: float) -> Verdict:
        """math-verify's verdict on `answer` against `gold` (gold first), "timeout" past `deadline_s` seconds."""
        if not deadline_s > 0:
            raise ValueError(f"deadline_s must be positive, got {deadline_s!r}")
        key = (gold, answer, deadline_s)
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        worker = self._checkout()
        verdict = worker.ask(gold, answer, deadline_s)
        if verdict is None:
            worker.kill()
        self._checkin(worker if verdict is not None else None)
        verdict = verdict or "timeout"
        with self._lock:
            self.killed += verdict == "timeout"
            self._cache[key] = verdict
            if len(self._cache) > self.settings.cache_size:
                self._cache.popitem(last=False)
        return verdict

    def close(self) -> None:
        """Stop every idle worker; busy ones stop when their call ends."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            self._live -= len(idle)
            self._lock.notify_all()
        for worker in idle:
            worker.kill()

    @property
    def workers(self) -> int:
        """Worker processes alive now."""
        with self._lock:
            return self._live

    def _checkout(self) -> _Worker:
        with self._lock:
            while True:
                if self._closed:
                    raise RuntimeError("this grading pool is closed")
                if self._idle:
                    return self._idle.pop()
                if self._live < self.settings.workers:
                    self._live += 1
                    break
                self._lock.wait()
        try:  # started outside the lock: other calls go on meanwhile
            return _Worker(self.settings)
        except BaseException:
            self._checkin(None)
            raise

    def _checkin(self, worker: _Worker | None) -> None:
        """Give a worker back; None: it was killed (or never started), so its place is free."""
        with self._lock:
            if worker is None or self._closed:
                self._live -= 1
            else:
                self._idle.append(worker)
            self._lock.notify()
        if worker is not None and self._closed:
            worker.kill()


_default: GradingPool | None = None
_default_lock = threading.Lock()


def default_pool() -> GradingPool:
    """The process's shared pool (workers: up to 4, at most the CPU count); stopped at exit."""
    global _default
    with _default_lock:
        if _default is None:
            _default = GradingPool(PoolSettings(workers=max(1, min(4, os.cpu_count() or 1))))
            atexit.register(_default.close)
        return _default


def _forget_default_in_child() -> None:
    # A forked child must not share the parent's worker pipes: it starts its own pool when it first grades.
    global _default, _default_lock
    _default, _default_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_default_in_child)
