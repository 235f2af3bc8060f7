"""Env steps off the event loop: `blocking_step` envs step in worker threads, and in lockstep their episodes meet
at a barrier and go on in rollout order, so what a generator sees does not depend on which thread finished first."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

T = TypeVar("T")


@dataclass
class OffloadedSteps:
    """The env steps one event loop runs in threads (`blocking_step` envs): while any is in flight, more requests
    are on their way, and once any has run, requests arrive in the order threads happened to finish.

    `lockstep` restores the rollout's order: an episode of a blocking env whose steps are done waits at a barrier
    until every such episode is waiting there or over, and then all resume in rollout order (`order`), so their
    next requests are made in the same tick and in the same order whichever thread finished first. A batching
    generator sets it (it then serves a batch in that order), and so does a rollout with expert moves (an
    in-process scripted policy or warm-start recorder answers at once, so waiting costs nothing, and what it
    records stays in rollout order). Without it (a server answers each request on its own) an episode goes on as
    soon as its own steps are done.

    Attributes:
        in_flight: steps running in threads now.
        ran: some step ran in a thread on this loop.
        idle: set while no step is in flight.
        on_the_way: episodes of blocking envs that are neither at the barrier nor over.
        waiting: (order, resume) of the episodes at the barrier.
    """

    in_flight: int = 0
    ran: bool = False
    lockstep: bool = False
    idle: asyncio.Event = field(default_factory=asyncio.Event)
    on_the_way: int = 0
    waiting: list[tuple[tuple[int, ...], asyncio.Future[None]]] = field(default_factory=list)

    async def barrier(self, order: tuple[int, ...]) -> None:
        """Wait until every episode of a blocking env is here or over; then all resume, in `order`."""
        resume = asyncio.get_running_loop().create_future()
        self.waiting.append((order, resume))
        self.leave()
        await resume

    def leave(self) -> None:
        """An episode of a blocking env stops being on its way: it waits at the barrier, or it is over."""
        self.on_the_way -= 1
        if self.on_the_way == 0 and self.waiting:
            # From the loop, not from here: the episode arriving last must wait its turn too.
            asyncio.get_running_loop().call_soon(self._release)

    def _release(self) -> None:
        waiting, self.waiting = sorted(self.waiting, key=lambda item: item[0]), []
        self.on_the_way = len(waiting)
        for _, resume in waiting:  # their tasks wake in this order
            resume.set_result(None)


_offloaded_steps: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, OffloadedSteps] = weakref.WeakKeyDictionary()


def offloaded_steps() -> OffloadedSteps:
    """The running event loop's offloaded env steps."""
    loop = asyncio.get_running_loop()
    steps = _offloaded_steps.get(loop)
    if steps is None:
        steps = _offloaded_steps[loop] = OffloadedSteps()
        steps.idle.set()
    return steps


async def step_in_thread(move: Callable[[], T]) -> T:
    """Run `move` (an env step) in a worker thread, counted among the loop's steps in flight."""
    steps = offloaded_steps()
    steps.in_flight += 1
    steps.ran = True
    steps.idle.clear()
    try:
        return await asyncio.to_thread(move)
    finally:
        steps.in_flight -= 1
        if steps.in_flight == 0:
            steps.idle.set()
