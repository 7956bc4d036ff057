"""Generation engines: G completions per prompt, with the fields the trainer needs.

Notable features
  * One interface (`Engine.generate`, `Engine.sync_weights`) for every engine; the trainer never knows which
    one runs. `HFEngine` uses the training model itself through `transformers`' `generate` (the CPU default,
    and the reference the vLLM engine is tested against).
  * Batched and left-padded; sampling with temperature and top-p only. Model-side defaults that would change
    the sampling distribution (a `generation_config.json` with top_k=20 or a repetition penalty, as Qwen ships)
    are switched off explicitly: the trainer's log-probs must be those of the distribution that was sampled.
  * temperature 0 means greedy decoding (evaluation).
  * Each completion is cut after its first EOS; `truncated` is True when none came within `max_new_tokens`.
    `length` counts the response tokens including the EOS (what DAPO's length penalty uses).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 64


@dataclass
class Completion:
    token_ids: list[int]  # response tokens, EOS included when generated
    text: str  # decoded response, special tokens removed
    length: int  # len(token_ids)
    truncated: bool  # hit max_new_tokens without EOS
    logprobs: list[float] | None = None  # sampling log-probs per token, for engines that report them


class Engine:
    """Interface. `generate` returns, for each prompt, a list of `n` Completions."""

    def generate(self, prompts: list[str], n: int, params: SamplingParams) -> list[list[Completion]]:
        raise NotImplementedError

    def sync_weights(self, model) -> None:
        """Make the engine sample from `model`'s current weights (called after every optimizer step)."""


class HFEngine(Engine):
    def __init__(self, model, tokenizer, max_batch: int = 512):
        self.model, self.tok, self.max_batch = model, tokenizer, max_batch

    def sync_weights(self, model) -> None:
        self.model = model  # generates with the training model itself: nothing to copy

    @torch.no_grad()
    def generate(self, prompts: list[str], n: int, params: SamplingParams) -> list[list[Completion]]:
        tok, eos, pad = self.tok, self.tok.eos_token_id, self.tok.pad_token_id
        flat = [p for p in prompts for _ in range(n)]  # prompt-major: completions of a prompt are consecutive
        was_training = self.model.training
        self.model.eval()
        out: list[Completion] = []
        device = next(self.model.parameters()).device
        greedy = params.temperature == 0
        kw = dict(do_sample=False) if greedy else dict(do_sample=True, temperature=params.temperature, top_p=params.top_p, top_k=0)
        for s in range(0, len(flat), self.max_batch):
            chunk = flat[s : s + self.max_batch]
            enc = tok(chunk, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False).to(device)
            gen = self.model.generate(
                **enc, max_new_tokens=params.max_new_tokens, eos_token_id=eos, pad_token_id=pad,
                repetition_penalty=1.0, **kw,
            )
            resp = gen[:, enc["input_ids"].shape[1] :].tolist()  # (b, <= max_new_tokens)
            for ids in resp:
                if eos in ids:
                    ids = ids[: ids.index(eos) + 1]
                    truncated = False
                else:
                    truncated = True
                out.append(Completion(ids, tok.decode(ids, skip_special_tokens=True), len(ids), truncated))
        if was_training:
            self.model.train()
        return [out[i * n : (i + 1) * n] for i in range(len(prompts))]


def make_engine(name: str, model, tokenizer, **kw) -> Engine:
    if name == "hf":
        return HFEngine(model, tokenizer, **{k: v for k, v in kw.items() if k in ("max_batch",)})
    raise ValueError(f"unknown rollout engine {name!r}; expected 'hf'")
