"""DAPO: an open-source LLM reinforcement learning system at scale (arXiv 2503.14476), Sec. 3, Alg. 1, Eq. 8-13.

    J(theta) = E_q [ 1/sum_i|o_i| sum_i sum_t min( r_it * A_i , clip(r_it, 1-eps_low, 1+eps_high) * A_i ) ]   (Eq. 12)
               s.t. 0 < |{o_i : is_equivalent(a, o_i)}| < G                                                  (Eq. 11)
    R_length(y) = 0 if |y| <= L_max - L_cache; ((L_max - L_cache) - |y|) / L_cache if <= L_max; -1 else    (Eq. 13)
    r_it     = pi_theta(o_it | q, o_i,<t) / pi_theta_old(o_it | q, o_i,<t)          (importance ratio)
    A_i      = (R_i - mean(R_1..R_G)) / (std(R_1..R_G) + delta)                     (group-relative advantage)
    D_KL,it  = pi_ref/pi_theta - log(pi_ref/pi_theta) - 1                           (k3 estimator, always >= 0)

    paper             code                        shape     (B prompts, G samples each, N = B*G responses, T tokens)
    R_i               rewards                     (N,)      grouped as consecutive runs of G
    A_i               advantages                  (N,)      broadcast over the tokens of o_i
    log pi_theta      logp                        (N, T)
    log pi_theta_old  old_logp                    (N, T)
    log pi_ref        ref_logp                    (N, T)
    1[t < |o_i|]      mask                        (N, T)    1 on response tokens that count, 0 on pad
    delta             eps                         float     1e-6, added to the std
    beta              kl_coef                     float     PAPER's; 0 in every recipe but Ring-lite's (1e-3)
    eps_low/eps_high  clip_low / clip_high        float     0.2 / 0.28
    sum_i |o_i|       num_tokens                  float     response tokens of the whole mini-batch
    is_equivalent     correct                     (N,)      bool, the correctness, not the shaped reward
    |y|, L_max/L_cache  lengths, max_len/cache_len          valid response tokens (EOS included); 20480 / 4096
    truncated         truncated                   (N,)      bool, hit max_len without EOS

`diff grpo.py dapo.py` is DAPO's change list, `# DAPO change k` in the paper's order (Sec. 3.1-3.4). Choices where
the paper is silent (the peers: docs/peers.md):
  * Eq. 12 divides by one group's tokens; here by the mini-batch's, counted over micro-batches and processes.
  * The filter compares correctness, or for partial credit the unshaped scores (--filter-metric); a group of one stays.
  * Overlong filtering masks the loss only, rewards still enter the group statistics; off in "DAPO" (Table 1).
"""
from __future__ import annotations

import torch

# The paper's settings, as train.py flags: its recipe in config.RECIPES runs these (a length or batch size scaled to
# the built-in task there, beside the paper's), so an edit here changes what `--recipe` runs.
PAPER = dict(
    clip_low=0.2, clip_high=0.28,  # DAPO change 1 (Sec. 3.1, Eq. 10): clip-higher; eps_low kept, for rare tokens
    loss_agg="token-mean",  # DAPO change 3 (Sec. 3.3, Eq. 12): token-level loss
    kl_coef=0.0,  # beta: DeepSeekMath's is 0.04; the recipe leaves KL out, as the later papers do (--kl-coef 0.04)
    dynamic_sampling=True, gen_batch_factor=3,  # DAPO change 2 (Sec. 3.2, Eq. 11): rounds of 3 x the step's prompts
    overlong_buffer=4096, max_new_tokens=20480,  # DAPO change 4 (Sec. 3.4, Eq. 13; Sec. 4.1): L_cache, L_max
    overlong_filter=False,  # DAPO change 5 (Sec. 3.4, Table 1): a separate flag, off in "DAPO"
    wrong_reward=-1.0,  # DAPO's rule-based reward (Eq. 7): +1 correct, -1 otherwise
    eval_temperature=1.0, eval_top_p=0.7,  # DAPO Sec. 4.1: avg@32 at T = 1.0, top-p 0.7
)

LOSS_AGG = ("seq-mean-token-mean", "token-mean", "seq-mean-token-sum")


def equal_groups(values, group_size: int) -> torch.Tensor:
    """(B,) bool: the groups whose values (N,) are all equal, compared in float64 (a python float is not rounded to
    float32 first). Such a group has A = 0 on every response: DAPO's filter and Skywork's rejection drop it."""
    v = torch.as_tensor(values, dtype=torch.float64)  # (N,)
    if v.numel() % group_size:
        raise ValueError(f"{v.numel()} values do not split into groups of {group_size}")
    v = v.view(-1, group_size)  # (B, G)
    return (v == v[:, :1]).all(dim=1)  # (B,)


def group_advantages(rewards: torch.Tensor, group_size: int, scale_by_std: bool = True, eps: float = 1e-6) -> torch.Tensor:
    """A_i = (R_i - mean_group) / (std_group + eps); rewards (N,) hold consecutive groups of `group_size`.

    std: the unbiased (N-1) sample std (no paper says which). Statistics in float64, A returned in float32; an
    all-equal group gets exactly A = 0. scale_by_std=False: Dr. GRPO's mean-only advantage (arXiv 2503.20783)."""
    if group_size < 2:
        raise ValueError(f"group_size must be >= 2 for a group-relative baseline, got {group_size}")
    if rewards.numel() % group_size:
        raise ValueError(f"{rewards.numel()} rewards do not split into groups of {group_size}")
    r = rewards.to(torch.float64).view(-1, group_size)  # (B, G) statistics in float64, whatever the input dtype
    mean = r.mean(dim=1, keepdim=True)  # (B, 1)
    same = equal_groups(r.view(-1), group_size).unsqueeze(1)  # (B, 1)
    adv = torch.where(same, torch.zeros_like(r), r - mean)  # exactly 0, not mean's rounding error (0.7 - mean(0.7s))
    if scale_by_std:
        adv = adv / (r.std(dim=1, unbiased=True, keepdim=True) + eps)  # all-equal group: 0 / eps = 0
    return adv.to(torch.float32).view(-1)  # (N,)


# DAPO change 0: none to the log-probs; grpo.token_logprobs computes every recipe's (trainer/logprobs.py).


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k3 estimator of KL(pi_theta || pi_ref) per token: exp(ref - logp) - (ref - logp) - 1 >= 0 (Schulman, 2020).
    In the loss, not the reward (DeepSeekMath Eq. 4)."""
    d = ref_logp - logp  # (N, T)
    return torch.exp(d) - d - 1


def clipped_surrogate(logp, old_logp, advantages, clip_low: float = PAPER["clip_low"], clip_high: float = PAPER["clip_high"]):
    """Per-token PPO-clip loss -min(r A, clip(r, 1-eps_low, 1+eps_high) A) and where each clip bound is active.

    advantages (N,) broadcast over T; eps_low, eps_high = clip_low, clip_high (PAPER's).
    Returns loss (N, T), clipped_low (N, T) bool, clipped_high (N, T) bool.
    """
    adv = advantages.unsqueeze(-1)  # (N, 1)
    ratio = torch.exp(logp - old_logp)  # (N, T); exactly 1 on the first on-policy update
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1 - clip_low, 1 + clip_high) * adv
    loss = -torch.min(unclipped, clipped)  # (N, T)
    clipped_low = (ratio < 1 - clip_low) & (adv < 0)  # the clip term is the active one in min()
    clipped_high = (ratio > 1 + clip_high) & (adv > 0)
    return loss, clipped_low, clipped_high


def dual_clip(loss_tok: torch.Tensor, advantages: torch.Tensor, c: float):
    """Dual-clip PPO (Ye et al. 2020, arXiv 1912.09729) on a per-token clipped loss (N, T): for A < 0 the loss is
    at most c * |A|, so a ratio far above 1 + eps on a negative advantage cannot push the loss up without bound.
    No paper here uses it: off unless --dual-clip C. Returns the loss and where the bound is active, (N, T) bool."""
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
    num_seqs / num_tokens default to this tensor's own counts; pass the mini-batch totals when it is a micro-batch
    (the trainer counts them over micro-batches and processes), so a split mini-batch is normalised once.
    num_seqs counts the NON-EMPTY rows: a fully masked row (DAPO's overlong filter, C3PO's budget) leaves the loss and
    the mean, so emptying it changes nothing; num_seqs = all rows gives the peers' count (docs/peers.md).
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
    dual_clip_c > 1 bounds the clipped loss of a negative advantage by c * |A| before the weights (`dual_clip`);
    0 = off, and then the metrics have no `clip_frac_dual`.
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


# DAPO change 2 (Sec. 3.2, Eq. 11, Alg. 1): dynamic sampling, between reward and advantage.
def filter_groups(correct, group_size: int) -> torch.Tensor:
    """Keep mask (B,) of groups whose correctness (N,) is not all-equal: 0 < #correct < G (Eq. 11). Correctness, not
    the shaped reward: the overlong penalty must not rescue an all-wrong group. A group of one sample is kept."""
    return ~equal_groups(correct, group_size) | (group_size == 1)  # (B,)


class DynamicSamplingExhausted(RuntimeError):
    """--max-gen-rounds rounds without enough mixed groups: the data is too easy or too hard for the model."""


class DynamicSampler:
    """Dynamic sampling's refill (Alg. 1): each step start(), then add(groups, correct) per generation round until
    `full` (DynamicSamplingExhausted after max_gen_rounds rounds, <= 0 unlimited), then take() the first target_groups
    kept groups in generation order; the surplus is discarded."""

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
    """R_length (N,) times `factor`, from valid response lengths (N,). A truncated wrong answer scores -1 + -1 = -2."""
    if not 0 < cache_len <= max_len:
        raise ValueError(f"need 0 < cache_len <= max_len, got cache_len={cache_len}, max_len={max_len}")
    y = torch.as_tensor(lengths).float()  # (N,)
    ramp = ((max_len - cache_len) - y) / cache_len  # (N,); > 0 before the buffer, < -1 past L_max
    return ramp.clamp(min=-1.0, max=0.0) * factor  # (N,)


# DAPO change 5 (Sec. 3.4, Table 1 "Overlong Filtering"): mask the loss of truncated samples; off in "DAPO".
def overlong_mask(mask: torch.Tensor, truncated) -> torch.Tensor:
    """policy_loss's mask (N, T) with every token of a truncated response zeroed (its reward still counts)."""
    t = torch.as_tensor(truncated, dtype=torch.bool, device=mask.device)  # (N,)
    return mask * (~t).unsqueeze(-1).to(mask.dtype)  # (N, T)
