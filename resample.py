"""MiMo's easy-data filter and re-sampling (MiMo-7B, arXiv 2505.07608, Sec. 3.3): prompts the policy always solves
move to an easy pool, and each prompt slot is drawn from that pool with probability alpha = 10%.
Tests: python -m pytest tests/test_resample.py -q

    slot s of a batch:  src_s = easy pool  if pool non-empty and u_s < alpha,  u_s ~ U[0, 1)   else main pool
    after rewards:      pass_rate(q) = 1  ->  q moves main -> easy;   pass_rate(q) < 1 and q easy -> q moves back

    paper             code                        shape / type
    alpha             alpha                       float     0.1
    easy data pool    EasyPool.easy               list[int] dataset indices, in the order they became easy
    main pool         indices minus easy          list[int] walked in an epoch-shuffled order
    pass rate         pass_rates                  list[float] one per prompt (correct.view(B, G).float().mean(1))

Why: removing solved problems outright destabilised the policy updates (MiMo Sec. 3.3); keeping a few in every
batch guards against forgetting, and under dynamic sampling a still-perfect easy prompt is filtered out anyway,
so it yields gradient only when the policy regresses on it.

Where the paper is silent, and what this file chooses:
  * Per-slot Bernoulli(alpha), only while the easy pool is non-empty (if the main pool is empty, every slot is
    drawn from the easy pool). The expected share of easy slots is then alpha.
  * Easy draws are uniform WITH replacement (a tiny pool may repeat a prompt within a batch).
  * Refresh: an easy prompt whose group later scores below 1 moves back to the main pool (refresh=True); with
    refresh=False easy is forever. Back in the main pool it rejoins the epoch walk at its place in the permutation.
  * Main-pool order: a seeded permutation per epoch, walked by position and skipping easy prompts, so the state is
    (epoch, position, easy list, RNG state) and a resumed run draws exactly what the original would have.
"""
from __future__ import annotations

import random
from collections.abc import Sequence


class EasyPool:
    """Prompt sampler with MiMo's easy pool, with the calls of every prompt sampler (trainer/samplers.py):
    `draw(step, n)` before rollout, `observe(indices, pass_rates)` after rewards."""

    def __init__(self, indices: int | Sequence[int], alpha: float = 0.1, seed: int = 0, refresh: bool = True):
        self.indices = list(range(indices)) if isinstance(indices, int) else list(indices)
        if not self.indices:
            raise ValueError("EasyPool needs at least one prompt")
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"alpha must lie in [0, 1], got {alpha}")
        self.alpha, self.seed, self.refresh = alpha, seed, refresh
        self.rng = random.Random(seed)  # slot coins and easy draws; main order has its own per-epoch seed
        self.easy: list[int] = []
        self._easy_set: set[int] = set()
        self.epoch, self.pos = 0, 0
        self._order = self._permutation(0)
        self.slots = self.easy_slots = 0
        self.last_share = 0.0

    def _permutation(self, epoch: int) -> list[int]:
        order = list(self.indices)
        random.Random(f"{self.seed}:{epoch}").shuffle(order)  # str seeds hash with sha512: stable across runs
        return order

    def _next_main(self) -> int:
        while True:  # terminates: the caller checked that some prompt is not easy
            if self.pos >= len(self._order):
                self.epoch, self.pos = self.epoch + 1, 0
                self._order = self._permutation(self.epoch)
            idx = self._order[self.pos]
            self.pos += 1
            if idx not in self._easy_set:
                return idx

    def draw(self, step: int, n: int) -> list[int]:
        """Dataset indices for a batch of n prompt slots (the pool ignores the step)."""
        out, n_easy = [], 0
        main_empty = len(self._easy_set) >= len(set(self.indices))
        for _ in range(n):
            if self.easy and (main_empty or self.rng.random() < self.alpha):
                out.append(self.easy[self.rng.randrange(len(self.easy))])
                n_easy += 1
            else:
                out.append(self._next_main())
        self.slots, self.easy_slots = self.slots + n, self.easy_slots + n_easy
        self.last_share = n_easy / max(n, 1)
        return out

    def observe(self, indices: Sequence[int], pass_rates: Sequence[float]):
        """After rewards: perfect prompts join the easy pool; with refresh, failed easy prompts leave it."""
        if len(indices) != len(pass_rates):
            raise ValueError(f"{len(indices)} prompts but {len(pass_rates)} pass rates")
        for idx, rate in zip(indices, pass_rates):
            if rate >= 1.0 and idx not in self._easy_set:
                self.easy.append(idx)
                self._easy_set.add(idx)
            elif rate < 1.0 and self.refresh and idx in self._easy_set:
                self.easy.remove(idx)
                self._easy_set.discard(idx)

    def metrics(self) -> dict:
        return {"data/easy_pool_size": len(self.easy), "data/easy_slot_share": self.last_share,
                "data/easy_slot_share_total": self.easy_slots / max(self.slots, 1)}

    def state_dict(self) -> dict:
        return {"easy": list(self.easy), "epoch": self.epoch, "pos": self.pos, "rng": self.rng.getstate(),
                "slots": self.slots, "easy_slots": self.easy_slots, "last_share": self.last_share}

    def load_state_dict(self, state: dict):
        self.easy = list(state["easy"])
        self._easy_set = set(self.easy)
        self.epoch, self.pos = state["epoch"], state["pos"]
        self._order = self._permutation(self.epoch)
        v, internal, gauss = state["rng"]
        self.rng.setstate((v, tuple(internal), gauss))  # tuple again if the state went through JSON
        self.slots, self.easy_slots, self.last_share = state["slots"], state["easy_slots"], state["last_share"]
