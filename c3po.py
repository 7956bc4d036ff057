"""C3PO: constrained contextual computation policy optimisation (Ring-lite, arXiv 2506.14731, Sec. 3.2, Eq. 2-3).

    L_C3PO(theta) = -E[ 1/Phi sum_{i in S} sum_t 1[y_it in Y] ( min(r_it A_i, clip(r_it, 1-eps, 1+eps) A_i)
                                                               - beta D_KL,it ) ]   s.t. |Y| = Phi          (Eq. 2)
    S = (y_1..y_n) from the step's responses B with sum_{j<n} |y_j| < Phi <= sum_{j<=n} |y_j|                (Eq. 3)
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
    eps               clip_low (= clip_high)      float     0.2
    Phi, 1[y_it in Y] budget, budget_mask(mask, kept)       409,600 tokens a step in the paper; the (N, T) indicator
    |S|, Y            kept                        (N,)      tokens of response i that count (0 = not selected)

`diff grpo.py c3po.py` is C3PO's change list (`# C3PO change k`); Ring-lite's entropy term (Eq. 6) is entropy.py's.
Choices where the paper is silent (Ring-lite released no RL code):
  * Advantages come from the full groups, before selection (Fig. 3). Greedy in rollout order (or a seeded shuffle);
    the last response is cut so exactly Phi tokens count; fewer available: all count, still over Phi.
  * Phi is per optimizer step, each micro-batch divides by it; under DDP each process takes Phi / W (process_budget).
"""
from __future__ import annotations

import random  # C3PO change 1: budget_select's seeded shuffle

import torch

# The paper's settings, as train.py flags: its recipe in config.RECIPES runs these (a length or batch size scaled to
# the built-in task there, beside the paper's), so an edit here changes what `--recipe` runs.
PAPER = dict(
    clip_low=0.2, clip_high=0.2,  # eps, symmetric
    token_budget=409_600,  # C3PO change 1 (Sec. 4.1): Phi tokens per optimizer step; loss_agg "budget" follows (change 2)
    kl_coef=1e-3,  # C3PO change 3 (Sec. 4.1): Ring-lite keeps a KL loss, beta = 1e-3 (needs ref_logp)
    entropy_coef=5e-4,  # Ring-lite's total loss (Eq. 6): C3PO's loss + an entropy bonus, alpha = 5e-4 (entropy.py)
    eval_temperature=1.0, eval_top_p=0.95,  # Ring-lite Table 1: T 1.0, top-p 0.95
)

LOSS_AGG = ("seq-mean-token-mean", "token-mean", "seq-mean-token-sum", "budget")  # C3PO change 2: "budget"


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


# C3PO change 0: none to the log-probs; grpo.token_logprobs computes every recipe's (trainer/logprobs.py).


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


def aggregate(
    loss_tok: torch.Tensor, mask: torch.Tensor, mode: str, num_seqs: float | None = None, num_tokens: float | None = None,
    budget: float | None = None,  # C3PO change 2: Phi, the constant normaliser
):
    """Reduce a per-token loss (N, T) to a scalar.

    seq-mean-token-mean  1/num_seqs  * sum_i (sum_t m_it l_it / sum_t m_it)   GRPO, DeepSeekMath Eq. 3
    token-mean           1/num_tokens * sum_i sum_t m_it l_it                 DAPO Eq. 12 (mini-batch token mean)
    seq-mean-token-sum   1/num_seqs  * sum_i sum_t m_it l_it                  Dr. GRPO-style (no length normaliser)
    budget               1/budget    * sum_i sum_t m_it l_it                  C3PO Eq. 2 (constant 1/Phi), C3PO change 2
    num_seqs / num_tokens default to this tensor's own counts; pass the mini-batch totals when it is a micro-batch
    (the trainer counts them over micro-batches and processes), so a split mini-batch is normalised once.
    num_seqs counts the NON-EMPTY rows: a fully masked row (DAPO's overlong filter, C3PO's budget) leaves the loss and
    the mean, so emptying it changes nothing; num_seqs = all rows gives the peers' count (docs/peers.md).
    """
    mask = mask.to(loss_tok.dtype)
    if mode == "budget":  # C3PO change 2 (Sec. 3.2, Eq. 2): constant normaliser, whatever the token count
        if budget is None or budget <= 0:
            raise ValueError(f"loss_agg='budget' needs the token budget Phi > 0, got {budget}")
        return (loss_tok * mask).sum() / budget
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
    kl_coef=PAPER["kl_coef"], loss_agg="budget", num_seqs=None, num_tokens=None,
    budget=None, token_weights=None,  # C3PO change 2 (Sec. 3.2, Eq. 2): 1/Phi, the mask budget_mask(mask, kept)
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
    loss = aggregate(loss_tok, mask, loss_agg, num_seqs, num_tokens, budget)  # C3PO change 2: 1/Phi
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


# C3PO change 1 (Sec. 3.2, Eq. 3, Fig. 3): greedy token-budget selection, after advantages, before the loss.
def budget_select(lengths, budget: int, shuffle_seed: int | None = None) -> torch.Tensor:
    """Kept-token count (N,) long per response of `lengths` (N,), greedy in rollout order (or a seeded shuffle:
    `shuffle_seed`, no flag, tests only): the last one selected is cut so the counts sum to min(budget, sum(lengths)).
    Its mask: budget_mask(mask, kept)."""
    lens = [int(x) for x in torch.as_tensor(lengths).tolist()]
    order = list(range(len(lens)))
    if shuffle_seed is not None:
        random.Random(shuffle_seed).shuffle(order)
    kept, used = [0] * len(lens), 0
    for i in order:
        if used >= budget:
            break
        kept[i] = min(lens[i], budget - used)  # token-level cut of the last one: |Y| == Phi exactly
        used += kept[i]
    return torch.tensor(kept, dtype=torch.long)  # (N,)


def budget_mask(mask: torch.Tensor, kept: torch.Tensor) -> torch.Tensor:
    """1[y_it in Y] (N, T): the first kept_i counted tokens of each row of mask (any padding side)."""
    pos = torch.cumsum(mask.long(), dim=-1)  # (N, T); k on the k-th response token
    return mask * (pos <= kept.to(mask.device).unsqueeze(-1)).to(mask.dtype)  # (N, T)


def process_budget(budget: int, world: int) -> int:
    """Phi / W: one process's share of the step's budget under DDP over W processes. Each process selects Phi / W
    tokens of its own responses and divides its loss by Phi / W; DDP averages the W gradients, so the step's
    gradient is that of exactly Phi tokens over 1/Phi. A Phi that does not split evenly is refused (trainer/setup.py
    stops the run with one line before it starts), so |Y| = Phi holds exactly on any number of processes."""
    if budget % world:
        raise ValueError(f"--token-budget {budget} does not split over {world} processes (C3PO keeps exactly Phi tokens "
                         f"a step, Phi / {world} on each): give a multiple of {world}")
    return budget // world


def budget_metrics(lengths, kept: torch.Tensor, budget: int) -> dict:
    lens = torch.as_tensor(lengths).long()  # (N,)
    return {"c3po/tokens_used": int(kept.sum()), "c3po/budget_fill": kept.sum().item() / budget,
            "c3po/responses_used": int((kept > 0).sum()), "c3po/tokens_dropped": int((lens - kept).sum())}
