"""A scripted stand-in policy: candidates are the expert move or corrupted copies of it (no model)."""

from __future__ import annotations

import random
from dataclasses import dataclass

from verl_mas.rollout import Generation, GenerationRequest


def byte_ids(text: str) -> tuple[int, ...]:
    """Token ids of a scripted policy: the UTF-8 bytes (a real engine uses its tokenizer)."""
    return tuple(text.encode())


def render_messages(messages: tuple[dict[str, str], ...]) -> str:
    return "".join(f"<{m['role']}>\n{m['content']}\n" for m in messages) + "<assistant>\n"


@dataclass(frozen=True)
class ExpertMixPolicy:
    """Each candidate is the expert's move with probability `skill`, else a corrupted copy of it.

    Corruptions (dropping the last token, reversing the tokens, or a non-answer) make some branches
    better than others, so the tree has reward spread to show. Deterministic in (seed, request, turn).
    """

    skill: float = 0.5
    seed: int = 0

    async def __call__(self, request: GenerationRequest) -> list[Generation]:
        if request.expert is None:
            raise ValueError(
                f"ExpertMixPolicy needs the expert move for {request.request_id}: "
                "use RolloutConfig(with_expert=True) with an environment that implements expert()"
            )
        rng = random.Random(f"{self.seed}|{request.request_id}|{request.turn}")
        prompt_ids = byte_ids(render_messages(request.messages))
        texts = [
            request.expert if rng.random() < self.skill else corrupt(request.expert, rng) for _ in range(request.n)
        ]
        return [Generation(text=t, prompt_ids=prompt_ids, response_ids=byte_ids(t)) for t in texts]


def corrupt(text: str, rng: random.Random) -> str:
    """A wrong version of a move: its last token dropped, its tokens reversed, or no answer at all."""
    tokens = text.split()
    choice = rng.randrange(3)
    if choice == 0 and len(tokens) > 1:
        return " ".join(tokens[:-1])
    if choice == 1 and len(tokens) > 1:
        return " ".join(reversed(tokens))
    return "I am not sure."
