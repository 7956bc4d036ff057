"""DAPO: an open-source LLM reinforcement learning system at scale (arXiv 2503.14476), Sec. 3, Alg. 1, Eq. 8-13.

Same functions, same order as grpo.py, so `diff grpo.py dapo.py` is DAPO's change list; each change is marked
`# DAPO change k` where it lands. The paper's settings are `PAPER`, the flags `--recipe dapo` runs (config.RECIPES).
Advantages and KL are grpo.py's, unchanged (DAPO sets beta = 0); the log-probs are grpo.token_logprobs for every recipe.
  1) clip-higher: eps_low = 0.2, eps_high = 0.28                                   (Sec. 3.1, Eq. 10)
  2) token-level loss: 1/sum_i|o_i| sum_i sum_t, loss_agg="token-mean"             (Sec. 3.3, Eq. 12)
  3) dynamic sampling: keep groups with 0 < #correct < G, refill to B groups        (Sec. 3.2, Eq. 11, Alg. 1)
  4) soft overlong punishment: a length penalty added to the reward                (Sec. 3.4, Eq. 13)
  5) overlong filtering: zero the loss mask of truncated responses (separate flag) (Sec. 3.4, Table 1)

    J(theta) = E_q [ 1/sum_i|o_i| sum_i sum_t min( r_it * A_i , clip(r_it, 1-eps_low, 1+eps_high) * A_i ) ]
               s.t. 0 < |{o_i : is_equivalent(a, o_i)}| < G                                             (Eq. 8/11)
    R_length(y) = 0 if |y| <= L_max - L_cache; ((L_max - L_cache) - |y|) / L_cache if <= L_max; -1 else    (Eq. 13)

    paper             code                        shape
    eps_low/eps_high  clip_low / clip_high        float     0.2 / 0.28
    sum_i |o_i|       num_tokens                  float     response tokens of the whole mini-batch
    is_equivalent     correct                     (N,)      bool, the correctness, not the shaped reward
    |y|               lengths                     (N,)      valid response tokens, EOS included (verl's)
    L_max / L_cache   max_len / cache_len         int       20480 / 4096 in the paper (expected length 16384)
    truncated         truncated                   (N,)      bool, hit max_len without EOS
    (rest as grpo.py: R_i rewards (N,), A_i advantages (N,), logp/old_logp/ref_logp/mask (N, T))

Where the papers are silent or disagree, and what this file chooses (the peers as read in their code: verl =
verl-project/verl 1dda039, 2026-08-22; its DAPO recipe = verl-project/verl-recipe 48ea0a7, 2026-08-05, dapo/;
TRL = huggingface/trl f2cd577, 2026-07-24; tests/test_peers.py runs their code beside this file's):
  * Eq. 12 normalises by the tokens of one group (inside E_q); verl's token-mean divides by all response tokens of
    the mini-batch, over its data-parallel ranks (batch_num_tokens). The run that reproduced 50-52% AIME (verl
    4f80e46, 2025-05-01) did not: it took each micro-batch's token mean, weighted by the micro-batch's share of the
    mini-batch's responses, which equals the mini-batch mean only when every micro-batch holds the same tokens per
    response. We follow verl 1dda039: the trainer counts the mini-batch's tokens over all its micro-batches (and
    processes) and passes that as num_tokens; under DDP, whose all-reduce averages gradients over W processes, pass
    total / W. The per-micro-batch default is exact only when one micro-batch is the mini-batch.
  * Dynamic sampling filters on correctness (the recipe's `filter_groups.metric=acc`): a group that is all wrong but
    differs only in overlong penalty has shaped-reward std > 0 yet is dropped. With partial-credit rewards (MiMo's
    code rewards) the filter compares the verifier's scores instead (`metric=score`, the score before verl's overlong
    shaping), so a group with different partial scores and no full pass is kept; train.py --filter-metric picks it.
    The recipe's test is np.std > 0, which also keeps some groups of equal scores (three of 0.1: std 1.4e-17); here
    equal values drop the group. Groups of one sample are kept (as the recipe does).
    Kept groups accumulate over generation rounds; the FIRST target_groups in generation order are used and the
    surplus is discarded, not carried to the next step (the recipe's `batch[:traj_bsz]`, train_batch_size x n).
    Advantages are computed after filtering, on kept groups only (they are per-group anyway, so the order does not
    change them).
  * Overlong filtering masks the loss only: truncated responses' rewards still enter their group's mean/std (as TRL's
    mask_truncated_completions; the paper is silent). The recipe's FAQ says the best run used no overlong filtering
    (it overlaps with the soft punishment) while Table 1 lists it cumulatively: it is a separate flag, off for "DAPO".
  * Generation stops at L_max, so the -1 branch of Eq. 13 is reached exactly at |y| = L_max by the ramp (verl's
    reward manager has no -1 floor, min(-exceed / L_cache * factor, 0): the same up to L_max).
"""
from __future__ import annotations

import torch

# The paper's settings, as train.py flags: its recipe in config.RECIPES runs these (a length or batch size scaled to
# the built-in task there, beside the paper's), so an edit here changes what `--recipe` runs.
PAPER = dict(
    clip_low=0.2, clip_high=0.28,  # DAPO change 1 (Sec. 3.1, Eq. 10): clip-higher
    loss_agg="token-mean",  # DAPO change 2 (Sec. 3.3, Eq. 12): token-level loss
    kl_coef=0.0,  # beta = 0: DAPO removes the KL term (Sec. 2.3)
    # DAPO change 3 (Sec. 3.2, Eq. 11): dynamic sampling; each round draws 3 x the step's prompts (verl's DAPO recipe:
    # gen_batch_size = 3 x train_batch_size)
    dynamic_sampling=True, gen_batch_factor=3,
    overlong_buffer=4096, max_new_tokens=20480,  # DAPO change 4 (Sec. 3.4, Eq. 13; Sec. 4.1): L_cache, L_max
    overlong_filter=False,  # DAPO change 5 (Table 1): a separate flag, off in "DAPO" (the module docstring)
    wrong_reward=-1.0,  # DAPO's rule-based reward (Eq. 7): +1 correct, -1 otherwise
    eval_temperature=1.0, eval_top_p=0.7,  # DAPO Sec. 4.1: avg@32 at T = 1.0, top-p 0.7
)

LOSS_AGG = ("seq-mean-token-mean", "token-mean", "seq-mean-token-sum")


def group_advantages(rewards: torch.Tensor, group_size: int, scale_by_std: bool = True, eps: float = 1e-6) -> torch.Tensor:
    """A_i = (R_i - mean_group) / (std_group + eps); rewards (N,) hold consecutive groups of `group_size`."""
    if group_size < 2:
        raise ValueError(f"group_size must be >= 2 for a group-relative baseline, got {group_size}")
    if rewards.numel() % group_size:
        raise ValueError(f"{rewards.numel()} rewards do not split into groups of {group_size}")
    r = rewards.to(torch.float64).view(-1, group_size)  # (B, G) statistics in float64, whatever the input dtype
    mean = r.mean(dim=1, keepdim=True)  # (B, 1)
    same = (r == r[:, :1]).all(dim=1, keepdim=True)  # (B, 1) all-equal groups
    adv = torch.where(same, torch.zeros_like(r), r - mean)  # exactly 0, not mean's rounding error (0.7 - mean(0.7s))
    if scale_by_std:
        adv = adv / (r.std(dim=1, unbiased=True, keepdim=True) + eps)  # all-equal group: 0 / eps = 0
    return adv.to(torch.float32).view(-1)  # (N,)


# DAPO change 0: none to the log-probs. grpo.token_logprobs computes every recipe's (the trainer runs it,
# trainer/logprobs.py), so this file carries no copy of it.


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k3 estimator of KL(pi_theta || pi_ref) per token: exp(ref - logp) - (ref - logp) - 1 >= 0 (Schulman, 2020)."""
    d = ref_logp - logp  # (N, T)
    return torch.exp(d) - d - 1


def clipped_surrogate(logp, old_logp, advantages, clip_low: float = PAPER["clip_low"], clip_high: float = PAPER["clip_high"]):
    """Per-token PPO-clip loss -min(r A, clip(r, 1-eps_low, 1+eps_high) A) and where each clip bound is active.

    advantages (N,) broadcast over T. DAPO change 1: DAPO raises only eps_high (see policy_loss): raising eps_low too would let
    low-probability tokens be pushed to 0 (Sec. 3.1).
    Returns loss (N, T), clipped_low (N, T) bool, clipped_high (N, T) bool.
    """
    adv = advantages.unsqueeze(-1)  # (N, 1)
    ratio = torch.exp(logp - old_logp)  # (N, T); exactly 1 on the first on-policy update
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1 - clip_low, 1 + clip_high) * adv  # DAPO change 1: 1 + eps_high, eps_high > eps_low
    loss = -torch.min(unclipped, clipped)  # (N, T)
    clipped_low = (ratio < 1 - clip_low) & (adv < 0)  # the clip term is the active one in min()
    clipped_high = (ratio > 1 + clip_high) & (adv > 0)
    return loss, clipped_low, clipped_high


def dual_clip(loss_tok: torch.Tensor, advantages: torch.Tensor, c: float):
    """Dual-clip PPO (Ye et al. 2020, arXiv 1912.09729) on a per-token clipped loss (N, T): for A < 0 the loss is
    at most c * |A|, so a ratio far above 1 + eps on a negative advantage cannot push the loss up without bound.
    verl's compute_policy_loss_vanilla (clip_ratio_c, 3.0 by default, always on; 1dda039, 2026-08-22) and AReaL's
    ppo_actor_loss_fn (c_clip, off by default; cbff54d, 2026-08-22). Returns the loss and where the bound is active,
    (N, T) bool."""
    if not c > 1:
        raise ValueError(f"the dual-clip constant must be > 1, got {c}")
    adv = advantages.unsqueeze(-1).to(loss_tok.dtype).expand_as(loss_tok)  # (N, T)
    bound = -adv * c  # c * |A| where A < 0
    active = (adv < 0) & (loss_tok > bound)
    return torch.where(adv < 0, torch.minimum(loss_tok, bound), loss_tok), active


def aggregate(loss_tok: torch.Tensor, mask: torch.Tensor, mode: str, num_seqs: float | None = None, num_tokens: float | None = None):
    """Reduce a per-token loss (N, T) to a scalar.

    seq-mean-token-mean  1/num_seqs  * sum_i (sum_t m_it l_it / sum_t m_it)   GRPO, DeepSeekMath Eq. 3
    token-mean           1/num_tokens * sum_i sum_t m_it l_it                 DAPO Eq. 12 (mini-batch token mean)
    seq-mean-token-sum   1/num_seqs  * sum_i sum_t m_it l_it                  Dr. GRPO-style (no length normaliser)
    num_seqs / num_tokens default to this tensor's own counts; pass the mini-batch totals when it is a micro-batch.
    num_seqs counts the NON-EMPTY rows: a fully masked row (DAPO's overlong filter, C3PO's budget) leaves the loss and
    the mean. verl (1dda039, 2026-08-22) counts them only when given no global batch size; its trainer divides by
    every row of the mini-batch (num_seqs = all rows gives its number), and TRL (f2cd577, 2026-07-24) by all rows of
    the micro-batch: both shrink the others' gradient (grpo.py's module docstring).
    """
    mask = mask.to(loss_tok.dtype)
    if mode == "token-mean":
        denom = num_tokens if num_tokens is not None else mask.sum().clamp(min=1)
        return (loss_tok * mask).sum() / denom
    per_seq = (loss_tok * mask).sum(-1)  # (N,)
    if mode == "seq-mean-token-mean":
        per_seq = per_seq / mask.sum(-1).clamp(min=1)
    elif mode != "seq-mean-token-sum":
        raise ValueError(f"unknown loss aggregation {mode!r}; expected one of {LOSS_AGG}")
    denom = num_seqs if num_seqs is not None else (mask.sum(-1) > 0).sum().clamp(min=1)  # non-empty rows
    return per_seq.sum() / denom


def policy_loss(
    logp, old_logp, advantages, mask, ref_logp=None, *, clip_low=PAPER["clip_low"], clip_high=PAPER["clip_high"],
    kl_coef=PAPER["kl_coef"], loss_agg=PAPER["loss_agg"], num_seqs=None, num_tokens=None, token_weights=None,
    dual_clip_c=0.0,
):
    """The loss to minimise (minus the objective above) and its metrics, for one (micro-)batch.

    Shapes: logp, old_logp, ref_logp, mask (N, T); advantages (N,). Returns (loss, metrics dict of floats).
    token_weights (N, T), detached, multiply the clipped surrogate per token (not the KL term): truncated
    importance sampling between the rollout engine and the trainer (async_rollout.tis_weights); None = all ones.
    dual_clip_c > 1 bounds the clipped loss of a negative advantage by c * |A| before the weights (`dual_clip`,
    verl's clip_ratio_c); 0 = off, and then the metrics have no `clip_frac_dual`.
    DAPO change 5: for overlong filtering pass mask = overlong_mask(mask, truncated).
    """
    loss_tok, clipped_low, clipped_high = clipped_surrogate(logp, old_logp, advantages, clip_low, clip_high)
    dual = None
    if dual_clip_c:
        loss_tok, dual = dual_clip(loss_tok, advantages, dual_clip_c)
    if token_weights is not None:
        loss_tok = loss_tok * token_weights
    kl = None
    if kl_coef > 0:
        if ref_logp is None:
            raise ValueError("kl_coef > 0 needs ref_logp")
        kl = kl_k3(logp, ref_logp)  # (N, T)
        loss_tok = loss_tok + kl_coef * kl
    # DAPO change 2: loss_agg "token-mean", 1/num_tokens with num_tokens = the mini-batch's response tokens, which the
    # trainer counts over all micro-batches and processes (the module docstring)
    loss = aggregate(loss_tok, mask, loss_agg, num_seqs, num_tokens)
    m = mask.bool()
    n = m.sum().clamp(min=1)
    metrics = {
        "clip_frac_low": (clipped_low & m).sum().item() / n.item(),
        "clip_frac_high": (clipped_high & m).sum().item() / n.item(),
        "kl": (kl[m].mean().item() if kl is not None and m.any() else 0.0),
    }
    if dual is not None:
        metrics["clip_frac_dual"] = (dual & m).sum().item() / n.item()
    return loss, metrics


# DAPO change 3 (Sec. 3.2, Eq. 11, Alg. 1): dynamic sampling, between reward and advantage.
def filter_groups(correct, group_size: int) -> torch.Tensor:
    """Keep mask (B,) of groups whose correctness is not all-equal: 0 < #correct < G (Eq. 11).

    correct: list[bool] or tensor (N,) of consecutive groups. Pass correctness, not the shaped reward (the DAPO
    recipe's `metric=acc`): the overlong penalty must not rescue an all-wrong group. With partial-credit rewards pass
    the unshaped scores (`metric=score`): any two different values keep the group, equal ones never (the recipe's
    np.std can keep them: the module docstring). A group of one sample is kept.
    """
    c = torch.as_tensor(correct, dtype=torch.float64)  # (N,); python floats compared exactly, not through float32
    if c.numel() % group_size:
        raise ValueError(f"{c.numel()} correctness flags do not split into groups of {group_size}")
    c = c.view(-1, group_size)  # (B, G)
    return (c != c[:, :1]).any(dim=1) | (group_size == 1)  # (B,)


class DynamicSamplingExhausted(RuntimeError):
    """--max-gen-rounds rounds without enough mixed groups: the data is too easy or too hard for the model (verl's
    DAPO recipe, verl-recipe 48ea0a7, stops the same way: "Generated too many. Please check if your data are too
    difficult")."""


class DynamicSampler:
    """Refill bookkeeping for dynamic sampling: generate, filter, and repeat until `target_groups` groups are kept.

        sampler.start()                                    # each training step
        while not sampler.full:
            groups, correct = generate_round()             # groups: one item per prompt (any payload)
            sampler.add(groups, correct)                   # raises after max_gen_rounds rounds still short
        kept = sampler.take()                              # the first target_groups, in generation order

    max_gen_rounds <= 0 means unlimited (verl `max_num_gen_batches`, 10 in the DAPO recipe's 32B script; verl-recipe
    48ea0a7). Each round draws gen_batch_factor x target_groups prompts (train.py --gen-batch-factor; the recipe:
    gen_batch_size = 3 x train_batch_size), so a round usually fills the batch on its own and the surplus is
    discarded.
    """

    def __init__(self, target_groups: int, group_size: int, max_gen_rounds: int = 10):
        self.target_groups, self.group_size, self.max_gen_rounds = target_groups, group_size, max_gen_rounds
        self.last_metrics: dict = {}
        self.start()

    def start(self):
        self.kept, self.rounds, self.generated = [], 0, 0

    @property
    def full(self) -> bool:
        return len(self.kept) >= self.target_groups

    def add(self, groups, correct) -> bool:
        keep = filter_groups(correct, self.group_size)  # (B,)
        if len(groups) != keep.numel():
            raise ValueError(f"{len(groups)} groups but {keep.numel()} groups of correctness flags")
        self.rounds += 1
        self.generated += len(groups)
        self.kept.extend(g for g, k in zip(groups, keep.tolist()) if k)
        if not self.full and 0 < self.max_gen_rounds <= self.rounds:
            raise DynamicSamplingExhausted(
                f"dynamic sampling: only {len(self.kept)}/{self.target_groups} groups with mixed correctness after "
                f"{self.rounds} generation rounds; the data is too easy or too hard for this model "
                f"(filter it with tools/grade.py, or raise --max-gen-rounds)")
        return self.full

    def take(self) -> list:
        """The first target_groups kept groups; the surplus is discarded, as verl's DAPO recipe does (not carried)."""
        if not self.full:
            raise RuntimeError(f"dynamic sampling: take() with {len(self.kept)}/{self.target_groups} groups kept")
        out, self.last_metrics = self.kept[: self.target_groups], self.metrics()
        self.start()
        return out

    def metrics(self) -> dict:
        return {"rollout/gen_rounds": self.rounds, "rollout/groups_kept_frac": len(self.kept) / max(self.generated, 1),
                "rollout/groups_discarded_surplus": max(len(self.kept) - self.target_groups, 0)}


# DAPO change 4 (Sec. 3.4, Eq. 13): soft overlong punishment, added to the correctness reward before advantages.
def overlong_penalty(lengths, max_len: int, cache_len: int, factor: float = 1.0) -> torch.Tensor:
    """R_length (N,): 0 up to L_max - L_cache, then a linear ramp to -1 at L_max, -1 beyond (times `factor`).

    lengths: list[int] or tensor (N,) of valid response tokens. A truncated wrong answer scores -1 + -1 = -2.
    """
    if not 0 < cache_len <= max_len:
        raise ValueError(f"need 0 < cache_len <= max_len, got cache_len={cache_len}, max_len={max_len}")
    y = torch.as_tensor(lengths).float()  # (N,)
    ramp = ((max_len - cache_len) - y) / cache_len  # (N,); > 0 before the buffer, < -1 past L_max
    return ramp.clamp(min=-1.0, max=0.0) * factor  # (N,)


# DAPO change 5 (Sec. 3.4, Table 1 "Overlong Filtering"): mask the loss of truncated samples; off in "DAPO".
def overlong_mask(mask: torch.Tensor, truncated) -> torch.Tensor:
    """Loss mask (N, T) with every token of a truncated response zeroed; rewards still enter group statistics."""
    t = torch.as_tensor(truncated, dtype=torch.bool, device=mask.device)  # (N,)
    return mask * (~t).unsqueeze(-1).to(mask.dtype)  # (N, T)
