"""Owns the tester's local reward: what a reply's cases are worth, given how a correct program and the known-wrong
programs did on them (the env judges them; this only scores the verdicts).

Two rules (the `tester_reward` option):
- `catch_share` (the default): the share of the known-wrong programs that the reply's valid cases (those a correct
  program passes) catch together, minus `tester_case_penalty` for every case the correct program fails (repeats of
  an input included), never below `REWARD_FLOOR`. A repeated input earns nothing, so one input with several
  candidate outputs never scores more than committing to one.
- `credit_share` (the earlier rule): the share of the reply's cases, degenerate ones included, that earn credit: a
  correct program passes the case and some known-wrong program fails it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from verl_mas_envs.common import INVALID_OUTPUT_REWARD

TesterReward = Literal["credit_share", "catch_share"]
TESTER_REWARDS: tuple[TesterReward, ...] = ("credit_share", "catch_share")
# What a reply of wrong cases bottoms out at: below a valid case that catches nothing (0), above an unreadable reply
# (-0.5), so that a tester that cannot yet get an expected output right is never taught to write nothing readable
# (with a floor of -1, a training run did exactly that; docs/code.md, "The floor").
REWARD_FLOOR = INVALID_OUTPUT_REWARD / 2


@dataclass(frozen=True)
class Verdicts:
    """How the programs did on a reply's cases: its `new` cases first, then its repeats (an input seen earlier).

    Attributes:
        new: how many of the cases are new (the rest are repeats).
        correct: per case, whether the correct program passed it; None without a correct program (nothing checked).
        caught: per case, the indices of the known-wrong programs that failed it.
        known_wrong: how many known-wrong programs there were.
    """

    new: int
    correct: tuple[bool, ...] | None
    caught: tuple[frozenset[int], ...]
    known_wrong: int

    @property
    def _valid_new(self) -> list[int]:
        return [] if self.correct is None else [i for i in range(self.new) if self.correct[i]]

    @property
    def credited(self) -> int:
        """New cases the correct program passes and some known-wrong program fails."""
        return sum(bool(self.caught[i]) for i in self._valid_new)

    @property
    def caught_programs(self) -> int:
        """Known-wrong programs that fail some new case the correct program passes."""
        return len(frozenset().union(*(self.caught[i] for i in self._valid_new)))

    @property
    def failed_by_correct(self) -> int:
        """Cases, repeats included, that the correct program fails."""
        return 0 if self.correct is None else sum(not passed for passed in self.correct)


def tester_reward(rule: TesterReward, verdicts: Verdicts, degenerate: int, penalty: float) -> float:
    """The local reward of a reply with usable cases under `rule` (`degenerate`: its unusable cases and repeats)."""
    if rule == "credit_share":
        return verdicts.credited / (verdicts.new + degenerate)
    catch = verdicts.caught_programs / verdicts.known_wrong if verdicts.known_wrong else 0.0
    return max(REWARD_FLOOR, catch - penalty * verdicts.failed_by_correct)
