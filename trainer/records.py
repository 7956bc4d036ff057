"""The records that pass between the loop's steps (train.py): what a step hands to the next, by name.

    StepPlan     step 1's settings: the stage, its task (data, prompt order, reward), G, B, lengths (Run.plan)
    Rollout      steps 1-3: B groups of G scored responses on this process (train.collect)
    Advantages   step 4: A_i per response and the responses kept (train.advantages)
    UpdateBatch  step 5's input: what the update needs of each kept response (train.kept_responses)
    Update       step 5's result: the update's metrics (train.update_policy)
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class StepPlan:
    """What step `step` draws and generates; a function of the step alone (the producer thread of --rollout-lag
    plans the next step from it while the trainer updates, sharing no state that changes)."""
    step: int  # 0-based
    stage: object  # trainer.stages.RunStage: --stages' stage of this step (one stage without --stages)
    task: object  # trainer.setup.Task: the stage's data, prompt sampler, reward and prompt template
    group_size: int  # G (a curriculum stage may change it)
    n_prompts: int  # B over all processes (a curriculum stage may change it)
    sampling: object  # rollout.SamplingParams: temperature, top-p, response length, stop strings


@dataclass
class Rollout:
    """Steps 1-3's batch on this process, what steps 4-6 read: B groups of G responses, prompt-major (response i
    answers prompt i // G). N = B * G."""
    idx: list[int]  # (B,) dataset index of each prompt
    examples: list  # (B,) data.Example of each prompt (answer, difficulty level)
    prompts: list[str]  # (B,) prompt text, template applied
    completions: list  # (N,) rollout.Completion: token_ids, text, length, truncated (hit the length limit), logprobs
    rewards: list[float]  # (N,) the reward (DAPO's overlong penalty added when --overlong-buffer)
    correct: list[bool]  # (N,) the verifier's verdict (the accuracy; dynamic sampling's mixed-group test)
    group_size: int  # G
    timeouts: int = 0  # answers whose check ran out of --reward-timeout (scored --wrong-reward)
    generated: int = 0  # responses generated for this batch (dynamic sampling generates more than it keeps)
    observed: list[tuple[int, float]] = field(default_factory=list)  # (prompt index, pass rate) of EVERY generated
    # group, before any filter: MiMo's easy pool and the online filter need the all-correct groups DAPO drops
    metrics: dict = field(default_factory=dict)  # the techniques' own metrics (rollout/gen_rounds, seamless, async/)
    behav_logp: list | None = None  # --rollout-lag: log pi_behav (len_i,) per response, of the weights that sampled it
    version: int | None = None  # --rollout-lag: the step whose weights generated this batch

    @property
    def truncated(self) -> list[bool]:  # (N,) hit --max-new-tokens without an end of sequence
        return [c.truncated for c in self.completions]


@dataclass
class Advantages:
    """Step 4: the group-relative advantage of every response, and which responses enter the update."""
    values: torch.Tensor  # (N,) float32 A_i, constant over a response's tokens
    keep: torch.Tensor  # (N,) bool: False for groups dropped by Skywork's rejection sampling


@dataclass
class UpdateBatch:
    """Step 5's input on this process: the responses that enter the update (n of them) and what each one's loss needs."""
    prompt_ids: list[list[int]]  # (n,) the prompt's token ids
    response_ids: list[list[int]]  # (n,) the sampled tokens
    advantages: torch.Tensor  # (n,) float32 A_i
    truncated: list[bool]  # (n,) hit the length limit (DAPO's overlong filter)
    old_logp: list | None = None  # (n,) log pi_old per token, (len_i,) each: set before mu > 1 updates; None: ratio 1
    behav_logp: list | None = None  # (n,) log pi_behav per token (--tis-cap): the engine's, or with --rollout-lag the
    # producer's; None without truncated IS

    def __len__(self) -> int:
        return len(self.response_ids)


@dataclass
class Update:
    """Step 5's result."""
    metrics: dict  # policy/loss, policy/clip_frac_*, policy/kl, policy/entropy, policy/updates, perf/grad_norm, perf/lr, ...
