"""What every engine takes and returns: SamplingParams in, one list of n Completions per prompt out (Engine)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 64
    stop: tuple[str, ...] = ()  # stop strings (the response ends right after the token that completes one)


@dataclass
class Completion:
    token_ids: list[int]  # response tokens, EOS included when generated
    text: str  # decoded response, special tokens removed
    length: int  # len(token_ids)
    truncated: bool  # hit max_new_tokens without EOS
    logprobs: list[float] | None = None  # sampling log-probs per token, for engines that report them


class Engine:
    """Interface. `generate` returns, for each prompt, a list of `n` Completions.

    `progress`: None, or a function the hf and fast engines call while they generate with the rows just finished,
    [(row, token_ids)] (row = the index in the prompt-major flat list of len(prompts) * n): evaluate.py's progress
    bar. Display only: what `generate` returns and samples is the same with or without it."""

    progress = None

    def generate(self, prompts: list[str], n: int, params: SamplingParams) -> list[list[Completion]]:
        raise NotImplementedError

    def sync_weights(self, model) -> None:
        """Make the engine sample from `model`'s current weights (called after every optimizer step)."""
