"""Multi-stage curricula: Compass-Thinker-7B's difficulty stages (arXiv 2508.08909, abstract and Sec. 4.2) and
Skywork-OR1's growing context with per-stage online filtering and rejection sampling (arXiv 2505.22312, Sec. 3.1,
Tables 10-12). Tests: python -m pytest tests/test_curriculum.py -q

    stage(k)       = first s with k < until_step_s (the last stage once k passes every until_step)
    level of slot  ~ Categorical(level_weights of stage(k)), renormalised over levels with prompts left
    online filter  : at the first step of stage s > 0, drop q if acc_last(q) = 1, acc_last seen during stage s-1
                     (Skywork-OR1 only: train.py turns it on for the skywork recipe; Compass-Thinker keeps every prompt)
    rejection      : keep group i iff exists j: A_ij != 0 (Skywork Sec. 3.1); no refill, the batch shrinks

    paper                  code                         shape / type
    difficulty level 1-5   levels                       list[int | None], one per dataset example
    stage T / batch / G    CurriculumStage.max_new_tokens / batch_size / group_size
    A_ij                   values (advantages or rewards) (N,)   consecutive groups of G
    keep                   reject_zero_advantage(...)   (B,) bool

Where the papers are silent, and what this file chooses:
  * Compass-Thinker gives neither the number of stages, nor the level mix, nor the switch rule; Skywork switches
    "once the model's performance converged". Stages here switch on step count only; compass_stages() shifts the
    level mix easy -> hard over three equal stages, skywork_stages() follows Math-7B's Table 10 (8K/16K/32K, then
    half the batch and 4x the group) at the same fractions of the run, with lengths x1/x2/x4 of base_len.
  * Examples without a level count as level 3 (the middle; `default_level`).
  * Online filter: "correctness of 1 in the previous stage" is read as the LAST group accuracy observed for the
    prompt during the previous stage; prompts never observed there stay. Dropped prompts stay dropped.
  * Within a level, prompts are drawn by walking a seeded per-(level, epoch) permutation, so runs are resumable.
  * Rejection sampling: a group whose values are all equal has A = 0 on every response (for rewards and for
    mean-centred advantages alike), so that is the test, which also covers +-1 rewards where Skywork's code checks
    literal 0/1. Skywork also cuts the kept rows to a multiple of the data-parallel size; that is the trainer's job.
"""
from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

import torch

LEVELS = (1, 2, 3, 4, 5)


@dataclass
class CurriculumStage:
    until_step: int
    """The stage covers steps [previous until_step, until_step); the last stage continues past its end."""
    level_weights: tuple = (1.0, 1.0, 1.0, 1.0, 1.0)
    """Sampling weights of difficulty levels 1..5 (need not sum to 1)."""
    max_new_tokens: int = 1024
    group_size: int = 8
    batch_size: int = 8
    """Prompts per step (groups before any filtering)."""


class Curriculum:
    """Stage schedule and prompt sampler. `next_batch(step)` (or `draw(step, n)`) before rollout, `observe(...)` after
    rewards."""

    def __init__(self, stages: Sequence[CurriculumStage], levels: Sequence[int | None], seed: int = 0,
                 default_level: int = 3, online_filter: bool = False):
        if not stages:
            raise ValueError("a curriculum needs at least one stage")
        for a, b in pairwise(stages):
            if b.until_step < a.until_step:
                raise ValueError(f"stage ends must not decrease: {a.until_step} then {b.until_step}")
        for s in stages:
            if len(s.level_weights) != len(LEVELS) or min(s.level_weights) < 0:
                raise ValueError(f"level_weights needs {len(LEVELS)} non-negative weights, got {s.level_weights}")
        self.stages, self.seed, self.online_filter = list(stages), seed, online_filter
        self.levels = [default_level if lv is None else int(lv) for lv in levels]
        if any(lv not in LEVELS for lv in self.levels):
            raise ValueError(f"difficulty levels must be in {LEVELS}")
        self.by_level = {lv: [i for i, x in enumerate(self.levels) if x == lv] for lv in LEVELS}
        self.rng = random.Random(seed)
        self.stage_idx = 0
        self.dropped: set[int] = set()
        self.last_acc: dict[int, float] = {}  # prompt -> last group accuracy seen in the current stage
        self.walk = {lv: [0, 0] for lv in LEVELS}  # level -> [epoch, position]
        self._orders: dict[int, tuple[int, list[int]]] = {}  # level -> (epoch, permutation), a cache
        self.last_dropped = 0

    def stage_index(self, step: int) -> int:
        for k, s in enumerate(self.stages):
            if step < s.until_step:
                return k
        return len(self.stages) - 1

    def stage_at(self, step: int) -> CurriculumStage:
        return self.stages[self.stage_index(step)]

    def _begin_stage(self, k: int):
        if self.online_filter:
            newly = {i for i, acc in self.last_acc.items() if acc >= 1.0} - self.dropped
            self.dropped |= newly
            self.last_dropped = len(newly)
        self.last_acc.clear()
        self.stage_idx = k

    def _order(self, lv: int, epoch: int) -> list[int]:
        if self._orders.get(lv, (None,))[0] != epoch:
            order = list(self.by_level[lv])
            random.Random(f"{self.seed}:{lv}:{epoch}").shuffle(order)  # str seeds hash with sha512: stable across runs
            self._orders[lv] = (epoch, order)
        return self._orders[lv][1]

    def _left(self, lv: int) -> int:
        return sum(i not in self.dropped for i in self.by_level[lv])

    def _next(self, lv: int) -> int:
        epoch, pos = self.walk[lv]
        order = self._order(lv, epoch)
        while True:  # terminates: the caller checked that the level has a prompt left
            if pos >= len(order):
                epoch, pos = epoch + 1, 0
                order = self._order(lv, epoch)
            idx, pos = order[pos], pos + 1
            if idx not in self.dropped:
                self.walk[lv] = [epoch, pos]
                return idx

    def next_batch(self, step: int, batch_size: int | None = None) -> tuple[list[int], CurriculumStage]:
        """Dataset indices for this step's prompts and the stage's settings; applies the filter on stage entry."""
        k = self.stage_index(step)
        if k > self.stage_idx:
            self._begin_stage(k)
        stage = self.stages[k]
        avail = [(lv, w) for lv, w in zip(LEVELS, stage.level_weights) if w > 0 and self._left(lv) > 0]
        if not avail:
            raise RuntimeError(f"curriculum stage {k}: no prompts left at levels with weight > 0 "
                               f"({len(self.dropped)} dropped by the online filter)")
        lvs, ws = zip(*avail)
        n = batch_size if batch_size is not None else stage.batch_size
        return [self._next(lv) for lv in self.rng.choices(lvs, weights=ws, k=n)], stage

    def draw(self, step: int, n: int) -> list[int]:  # the trainer's sampler interface: the indices only
        return self.next_batch(step, n)[0]

    def observe(self, indices: Sequence[int], accuracies: Sequence[float]):
        """After rewards: the group accuracy (pass rate) of each prompt, for the next stage's online filter."""
        for i, acc in zip(indices, accuracies):
            self.last_acc[int(i)] = float(acc)

    def metrics(self) -> dict:
        return {"data/stage": self.stage_idx, "data/dropped_total": len(self.dropped),
                "data/dropped_at_stage_start": self.last_dropped}

    def state_dict(self) -> dict:
        return {"stage_idx": self.stage_idx, "dropped": sorted(self.dropped), "last_acc": dict(self.last_acc),
                "walk": {lv: list(w) for lv, w in self.walk.items()}, "rng": self.rng.getstate(),
                "last_dropped": self.last_dropped}

    def load_state_dict(self, state: dict):
        self.stage_idx, self.dropped = state["stage_idx"], set(state["dropped"])
        self.last_acc = {int(i): float(a) for i, a in state["last_acc"].items()}
        self.walk = {int(lv): list(w) for lv, w in state["walk"].items()}
        v, internal, gauss = state["rng"]
        self.rng.setstate((v, tuple(internal), gauss))  # tuple again if the state went through JSON
        self.last_dropped = state["last_dropped"]


def reject_zero_advantage(values, group_size: int) -> torch.Tensor:
    """Skywork-OR1 rejection sampling: keep mask (B,) of groups with some non-zero advantage. No refill.

    values: advantages or rewards (N,), consecutive groups. Expand to responses with keep.repeat_interleave(G).
    The test is grpo.equal_groups's, line for line (an idea file imports no other): float64, exact.
    """
    v = torch.as_tensor(values, dtype=torch.float64)  # (N,)
    if v.numel() % group_size:
        raise ValueError(f"{v.numel()} values do not split into groups of {group_size}")
    v = v.view(-1, group_size)  # (B, G)
    return ~(v == v[:, :1]).all(dim=1)  # (B,)


def skywork_stages(total_steps: int, base_len: int, batch_size: int = 8, group_size: int = 8) -> list[CurriculumStage]:
    """Skywork-OR1-Math-7B (Table 10: steps 0-740-1740-2080-2160, T 8K/16K/32K/32K) scaled to total_steps."""
    ends = [round(total_steps * f / 2160) for f in (740, 1740, 2080)] + [total_steps]
    lens = [base_len, 2 * base_len, 4 * base_len, 4 * base_len]
    stages = [CurriculumStage(e, max_new_tokens=t, group_size=group_size, batch_size=batch_size)
              for e, t in zip(ends, lens)]
    stages[-1].batch_size, stages[-1].group_size = max(batch_size // 2, 1), 4 * group_size  # stage 3.5: 128 x 64
    return stages


def compass_stages(total_steps: int, base_len: int, batch_size: int = 8, group_size: int = 8) -> list[CurriculumStage]:
    """Compass-Thinker's easy -> hard difficulty stages (mix and count [unspecified]: three equal stages)."""
    mixes = [(0.4, 0.3, 0.2, 0.1, 0.0), (0.1, 0.2, 0.4, 0.2, 0.1), (0.0, 0.1, 0.2, 0.3, 0.4)]
    ends = [round(total_steps * (k + 1) / 3) for k in range(3)]
    return [CurriculumStage(e, w, base_len, group_size, batch_size) for e, w in zip(ends, mixes)]
