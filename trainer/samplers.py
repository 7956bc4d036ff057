"""The prompt order of a task. Every sampler the loop uses answers the same three calls:

    sampler.draw(step, n) -> list[int]        dataset indices of n prompts for step `step` (before rollout)
    sampler.observe(indices, pass_rates)      every generated group's pass rate (after rewards)
    sampler.metrics(), state_dict(), load_state_dict(state)    its metrics.jsonl columns, its resumable position

EpochOrder (below) is the plain order; resample.EasyPool (MiMo's easy pool) and curriculum.Curriculum (Skywork-OR1 /
Compass-Thinker stages) implement the same calls. --stages gives each stage's task a sampler of its own. With N
processes every process draws the same global list and observes every process's groups, so the samplers stay equal.
"""
from __future__ import annotations

import random


class EpochOrder:
    """Walks the dataset in a fresh seeded permutation each epoch; (epoch, pos) is the resumable data position."""

    def __init__(self, n: int, seed: int):
        self.n, self.seed, self.epoch, self.pos = n, seed, 0, 0
        self._perm = self._make_perm()

    def _make_perm(self):
        return random.Random(f"{self.seed}-{self.epoch}").sample(range(self.n), self.n)

    def draw(self, step: int, n: int) -> list[int]:
        out = []
        while len(out) < n:
            if self.pos == self.n:
                self.epoch, self.pos = self.epoch + 1, 0
                self._perm = self._make_perm()
            out.append(self._perm[self.pos])
            self.pos += 1
        return out

    def observe(self, indices, pass_rates) -> None:
        """The plain order does not depend on results."""

    def metrics(self) -> dict:
        return {}

    def state_dict(self):
        return {"epoch": self.epoch, "pos": self.pos}

    def load_state_dict(self, s):
        self.epoch, self.pos = s["epoch"], s["pos"]
        self._perm = self._make_perm()


def make_sampler(cfg, train_set):
    """A task's prompt order: the plain epoch walk, MiMo's easy pool, or a staged curriculum (all resumable)."""
    import curriculum
    import resample

    if cfg.curriculum:
        mk = curriculum.skywork_stages if cfg.curriculum == "skywork" else curriculum.compass_stages
        base = cfg.max_new_tokens // 2 if cfg.curriculum == "skywork" else cfg.max_new_tokens
        stages = mk(cfg.max_steps, base, batch_size=cfg.batch_size // cfg.group_size, group_size=cfg.group_size)
        return curriculum.Curriculum(stages, [ex.level for ex in train_set], seed=cfg.seed, online_filter=cfg.online_filter)
    if cfg.easy_pool_alpha > 0 or cfg.drop_solved:
        return resample.EasyPool(len(train_set), alpha=cfg.easy_pool_alpha, seed=cfg.seed, refresh=not cfg.drop_solved)
    return EpochOrder(len(train_set), cfg.seed)
