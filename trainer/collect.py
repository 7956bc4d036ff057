"""Steps 1-3 on this process: draw prompts, generate G completions each, score them -- in one round, in DAPO's
dynamic-sampling rounds, or with MiMo's seamless scheduler -- and feed every group's pass rate back to the sampler.

Plain: one round of B prompts. Dynamic sampling (DAPO Alg. 1, dapo.py): rounds of --gen-batch-factor x B prompts
until B mixed groups are kept (the first in generation order; the surplus is discarded); mixed = correctness differs
(--filter-metric acc) or the verifier's partial scores differ (score, the code-strict/soft default). Seamless (MiMo
Sec. 3.4.1, seamless.py): the same groups, launched as the pass-rate estimate says, scored while others generate.
With N processes every process draws the same global prompt list (the samplers stay in lockstep) and keeps its share
of whole groups.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch

import dapo
from seamless import Group, SeamlessRollout
from tasks.templates import build_prompt, parse_template_kwargs
from trainer.records import Rollout, StepPlan
from trainer.stages import filter_metric_for


@dataclass
class Round:
    """One generation round on this process: B prompts and their G scored completions each, prompt-major, under
    trainer.records.Rollout's field names, and `filter_values`, what dynamic sampling compares (correct, or the
    unshaped rewards with --filter-metric score). A group (one prompt's slice) is a seamless.Group."""
    idx: list
    examples: list
    prompts: list
    completions: list
    rewards: list
    correct: list
    group_size: int
    filter_values: list | None = None

    def groups(self) -> list[Group]:  # one per prompt, for dapo.DynamicSampler
        G = self.group_size
        return [Group(self.idx[i], self.examples[i], self.prompts[i], self.completions[i * G:(i + 1) * G],
                      self.rewards[i * G:(i + 1) * G], self.correct[i * G:(i + 1) * G]) for i in range(len(self.idx))]

    @staticmethod
    def from_groups(groups: list[Group], group_size: int) -> Round:
        return Round([g.idx for g in groups], [g.example for g in groups], [g.prompt for g in groups],
                     [c for g in groups for c in g.completions], [r for g in groups for r in g.rewards],
                     [c for g in groups for c in g.correct], group_size)


class Collector:
    """Steps 1-3 of a training step on this process (see the module docstring); `collect(plan)` -> Rollout."""

    def __init__(self, run, engine=None, tok=None):
        self.run, self.cfg, self.accelerator = run, run.cfg, run.accelerator
        self.engine = engine or run.engine  # --rollout-lag: the producer's engine, on its own copy of the policy
        self.tok = tok or run.tok  # --rollout-lag: the producer's own tokenizer (a fast tokenizer is not thread-safe)
        self.world, self.rank = run.accelerator.num_processes, run.accelerator.process_index
        self.observed: list = []  # (prompt index, pass rate) of every group generated this step
        self.seamless = None
        if self.cfg.seamless:  # (one task: --seamless and --stages do not combine)
            self.seamless = SeamlessRollout(  # streaming with --rollout vllm (continuous batching), else waves
                run.engine, run.tasks[0].reward_fn,
                max_wave=max(4, self.cfg.seamless_max_wave or self.cfg.batch_size // self.cfg.group_size // 2))

    def collect(self, plan: StepPlan) -> Rollout:
        """The step's batch on this process, with every generated group's pass rate in `observed`."""
        self.observed, extra = [], {}
        if self.cfg.dynamic_sampling and self.seamless is not None:
            batch = self._seamless(plan, extra)
            timeouts, n_gen = extra.pop("reward/timeouts"), extra.pop("rollout/generated")
        elif self.cfg.dynamic_sampling:
            batch, timeouts, n_gen = self._dynamic(plan, extra)
        else:
            batch, timeouts = self.round(plan, plan.n_prompts)
            n_gen = len(batch.completions)
        return Rollout(batch.idx, batch.examples, batch.prompts, batch.completions, batch.rewards, batch.correct,
                       batch.group_size, timeouts=timeouts, generated=n_gen, observed=self.observed, metrics=extra)

    def take_prompts(self, plan: StepPlan, n_global, strided=False):
        """This process's slice of the global draw: a contiguous block of whole groups, or (strided) every world-th
        prompt from its rank on, so that draws of any size give each process its own prompts."""
        idx = plan.task.sampler.draw(plan.step, n_global)
        if strided:
            return idx[self.rank::self.world]
        n_local = n_global // self.world
        return idx[self.rank * n_local : (self.rank + 1) * n_local]

    def prompt(self, plan: StepPlan, question: str) -> str:
        """The prompt text of a training question: --template (and --system-prompt) for the task's kind."""
        return build_prompt(self.tok, question, plan.task.kind, self.cfg.template, self.cfg.system_prompt,
                                 parse_template_kwargs(self.cfg.chat_template_kwargs))

    def shape(self, comps, rewards, sampling):
        """DAPO Eq. 13: the soft overlong punishment is added to the correctness reward, before the group statistics."""
        if not self.cfg.overlong_buffer:
            return rewards
        pen = dapo.overlong_penalty([c.length for c in comps], sampling.max_new_tokens, self.cfg.overlong_buffer)
        return (torch.tensor(rewards) + pen).tolist()

    def round(self, plan: StepPlan, n_global):
        """One plain round: (Round, reward timeouts)."""
        G, task = plan.group_size, plan.task
        idx = self.take_prompts(plan, n_global)
        exs = [task.train_set[i] for i in idx]
        prompts = [self.prompt(plan, ex.prompt) for ex in exs]
        comps = [c for g in self.engine.generate(prompts, G, plan.sampling) for c in g]  # (N,) prompt-major
        rewards, correct, reward_metrics = task.reward_fn([c.text for c in comps], [ex.answer for ex in exs for _ in range(G)],
                                                          truncated=[c.truncated for c in comps])  # reward.py, rule 5
        self.observed.extend(zip(idx, torch.tensor(correct, dtype=torch.float).view(-1, G).mean(1).tolist()))
        filter_values = correct if filter_metric_for(self.cfg, plan.stage.reward) == "acc" else rewards
        shaped = self.shape(comps, rewards, plan.sampling)
        return Round(idx, exs, prompts, comps, shaped, correct, G, filter_values), reward_metrics["reward/timeouts"]

    def _dynamic(self, plan: StepPlan, extra):
        G = plan.group_size
        sampler = dapo.DynamicSampler(plan.n_prompts // self.world, G, self.cfg.max_gen_rounds)
        n_gen, timeouts = 0, 0
        while True:
            # verl's gen_batch_size (its DAPO recipe: 3 x the train batch; docs/peers.md)
            n_draw = plan.n_prompts * self.cfg.gen_batch_factor
            if sampler.full:  # another process is still short: draw (and skip) its round to keep samplers in lockstep
                self.take_prompts(plan, n_draw)
            else:
                generated, round_timeouts = self.round(plan, n_draw)
                # raises after --max-gen-rounds
                sampler.add(generated.groups(), torch.tensor(generated.filter_values, dtype=torch.float64))
                n_gen, timeouts = n_gen + len(generated.completions), timeouts + round_timeouts
            short = torch.tensor([0.0 if sampler.full else 1.0], device=self.accelerator.device)
            if not self.accelerator.reduce(short, "sum").item():
                break
        extra.update(sampler.metrics())
        return Round.from_groups(sampler.take(), G), timeouts, n_gen

    def _seamless(self, plan: StepPlan, extra):
        scheduler, world, train_set, sampling = self.seamless, self.world, plan.task.train_set, plan.sampling
        n_local = plan.n_prompts // world  # each process collects its share of the groups
        drawn = [0]

        def next_prompts(k):  # k prompts for this process: positions rank, rank + world, ... of the global draw
            drawn[0] += k
            return [(i, train_set[i], self.prompt(plan, train_set[i].prompt), train_set[i].answer)
                    for i in self.take_prompts(plan, k * world, strided=True)]

        groups = scheduler.collect(
            next_prompts, n_local, plan.group_size, sampling,
            max_groups=n_local * self.cfg.max_gen_rounds if self.cfg.max_gen_rounds > 0 else 10**9,
            shape=(lambda comps, r: self.shape(comps, r, sampling)) if self.cfg.overlong_buffer else None,
            filter_metric=filter_metric_for(self.cfg, plan.stage.reward))
        batch = Round.from_groups(groups, plan.group_size)
        if world > 1:  # processes drew different amounts: all draw (and skip) up to the largest, in lockstep
            most = int(self.accelerator.reduce(torch.tensor([float(drawn[0])], device=self.accelerator.device), "max").item())
            if most > drawn[0]:
                self.take_prompts(plan, (most - drawn[0]) * world)
        self.observed.extend(scheduler.last_observed)  # every scored group, for the easy pool / online filter
        extra.update(scheduler.last_metrics)
        return batch

    def close(self):
        if self.seamless is not None:
            self.seamless.close()


def observe(run, plan: StepPlan, rollout: Rollout, step: int) -> dict:
    """Every generated group's pass rate goes to the step's sampler (MiMo's easy pool, the curriculum's online
    filter; the plain order ignores it); all processes see all of them, so the samplers stay identical (checked: a
    digest of each process's sampler, every step). Returns the sampler's metrics."""
    from accelerate.utils import gather_object

    s, world = plan.task.sampler, run.accelerator.num_processes
    seen = gather_object(rollout.observed) if world > 1 else rollout.observed
    s.observe([i for i, _ in seen], [p for _, p in seen])
    if world > 1:  # invariant: every process holds the same prompt sampler (else they train on other data)
        st = {k: v for k, v in s.state_dict().items() if k != "last_share"}  # last_share: a metric
        if len(set(gather_object([hashlib.sha256(repr(st).encode()).hexdigest()]))) > 1:
            raise RuntimeError(f"step {step + 1}: the prompt samplers of the {world} processes diverged")
    return s.metrics()
