"""CISPO: clipped IS-weight policy optimisation (MiniMax-M1, arXiv 2506.13585, Sec. 3.1, Eq. 3-7).

    J(theta) = E_q [ 1/sum_i|o_i| sum_i sum_t sg(r^_it) * A_i * log pi_theta(o_it | q, o_i,<t) ]             (Eq. 4)
    r^_it    = clip(r_it, 1 - eps_low, 1 + eps_high)                                                      (Eq. 5)
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
    eps_low/eps_high  clip_low / clip_high        float     1.0 / 4.0: the weight capped at 5, no floor

`diff grpo.py cispo.py` is CISPO's change list (`# CISPO change k`); choices and the peers': docs/peers.md.
"""
from __future__ import annotations

import torch

# The paper's settings, as train.py flags: its recipe in config.RECIPES runs these (a length or batch size scaled to
# the built-in task there, beside the paper's), so an edit here changes what `--recipe` runs.
PAPER = dict(
    clip_low=1.0, clip_high=4.0,  # CISPO change 2 (Eq. 5): the weight capped above at 1 + 4 = 5, no floor (1 - 1 = 0)
    loss_agg="token-mean",  # CISPO change 3 (Eq. 4): token-level loss, as dapo.py
    kl_coef=0.0,  # beta: DeepSeekMath's is 0.04; the recipe leaves KL out, as the later papers do (--kl-coef 0.04)
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


# CISPO change 0: none to the log-probs; grpo.token_logprobs computes every recipe's (trainer/logprobs.py).


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k3 estimator of KL(pi_theta || pi_ref) per token: exp(ref - logp) - (ref - logp) - 1 >= 0 (Schulman, 2020).
    In the loss, not the reward (DeepSeekMath Eq. 4)."""
    d = ref_logp - logp  # (N, T)
    return torch.exp(d) - d - 1


def clipped_surrogate(logp, old_logp, advantages, clip_low: float = PAPER["clip_low"], clip_high: float = PAPER["clip_high"]):
    """Per-token loss -sg(clip(r, 1-eps_low, 1+eps_high)) A log pi and where the weight is capped (CISPO change 1).

    advantages (N,) broadcast over T; eps_low, eps_high = clip_low, clip_high (PAPER's).
    Returns loss (N, T), capped_low (N, T) bool, capped_high (N, T) bool, the weight's caps (CISPO change 1).
    """
    adv = advantages.unsqueeze(-1)  # (N, 1)
    ratio = torch.exp(logp - old_logp)  # (N, T); exactly 1 on the first on-policy update
    weight = torch.clamp(ratio, 1 - clip_low, 1 + clip_high).detach()  # (N, T) CISPO change 1 (Eq. 4-5): sg(r^_it)
    loss = -weight * adv * logp  # (N, T)
    return loss, ratio < 1 - clip_low, ratio > 1 + clip_high


def dual_clip(loss_tok: torch.Tensor, advantages: torch.Tensor, c: float):
    """Dual-clip PPO (Ye et al. 2020, arXiv 1912.09729) on a per-token clipped loss (N, T): for A < 0 the loss is
    at most c * |A|, so a ratio far above 1 + eps on a negative advantage cannot push the loss up without bound.
    Refused, following CISPO change 1: there is no min() for it to bound, and the weight is capped already."""
    raise ValueError(f"CISPO has no dual clip (its importance weight is capped already), got dual_clip_c={c}")


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
    unified_mask=False,  # CISPO change 4 (Eq. 6-7): M_it = 0 on the tokens PPO's clip drops; off, as M1 trains (no flag)
):
    """The loss to minimise (minus the objective above) and its metrics, for one (micro-)batch.

    Shapes: logp, old_logp, ref_logp, mask (N, T); advantages (N,). Returns (loss, metrics dict of floats).
    token_weights (N, T), detached, multiply the clipped surrogate per token (not the KL term): truncated
    importance sampling between the rollout engine and the trainer (async_rollout.tis_weights); None = all ones.
    dual_clip_c > 1 bounds the clipped loss of a negative advantage by c * |A| before the weights (`dual_clip`);
    refused here (following CISPO change 1): dual_clip_c must be 0.
    """
    loss_tok, capped_low, capped_high = clipped_surrogate(logp, old_logp, advantages, clip_low, clip_high)
    adv = advantages.unsqueeze(-1)  # (N, 1); CISPO change 4: where PPO's clip would drop the gradient (M_it = 0)
    clipped_low, clipped_high = capped_low & (adv < 0), capped_high & (adv > 0)
    if unified_mask:
        loss_tok = loss_tok * ~(clipped_low | clipped_high)
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
    metrics["capped_frac_low"] = (capped_low & m).sum().item() / n.item()  # CISPO change 1's caps, any A
    metrics["capped_frac_high"] = (capped_high & m).sum().item() / n.item()
    return loss, metrics
