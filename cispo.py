"""CISPO: clipped IS-weight policy optimisation (MiniMax-M1, arXiv 2506.13585, Sec. 3.1, Eq. 3-7).

Same functions, same order as grpo.py, so `diff grpo.py cispo.py` is CISPO's change list; each change is marked
`# CISPO change k` where it lands. The paper's settings are `PAPER`, the flags `--recipe cispo` runs (config.RECIPES).
Advantages, log-probs, KL and aggregation are grpo.py's, unchanged (M1 has no KL).
  1) REINFORCE with a clipped, detached importance weight: sg(r^_it) A_i log pi_theta; no token's gradient is dropped
     (PPO's clip drops the rare "fork" tokens, "However", "Wait", after the first update)                 (Eq. 3-5)
  2) the weight is capped above only: eps_high = 4 (cap 1 + 4 = 5), eps_low = 1 (1 - eps_low = 0 never binds) (Eq. 5)
  3) token-level loss: 1/sum_i|o_i| sum_i sum_t, loss_agg="token-mean" (DAPO's)                                (Eq. 4)
  4) the unified form (unified_mask=True): M_it zeroes the tokens PPO's clip would drop; off, as M1 trains (Eq. 6-7)
  5) no dual clip: refused (no min() for it to bound; the weight is capped already)
  6) the weight-capped share of tokens per side (capped_frac_*), beside those PPO would drop (clip_frac_*)

    J(theta) = E_q [ 1/sum_i|o_i| sum_i sum_t sg(r^_it) * A_i * log pi_theta(o_it | q, o_i,<t) ]                  (Eq. 4)
    r^_it    = clip(r_it, 1 - eps_low, 1 + eps_high),  r_it = pi_theta(o_it | ...) / pi_old(o_it | ...)             (Eq. 5)
    M_it     = 0 if (A_i > 0 and r_it > 1 + eps_high) or (A_i < 0 and r_it < 1 - eps_low), else 1      (Eq. 7: M_it sg(r^_it) ...)

    paper             code                        shape
    r_it              ratio                       (N, T)    exp(logp - old_logp)
    sg(r^_it)         weight                      (N, T)    clamp(ratio, 1 - clip_low, 1 + clip_high), detached
    eps_low/eps_high  clip_low / clip_high        float     1.0 / 4.0 (the paper gives no eps_high; see below)
    M_it              ~(clipped_low | clipped_high)  (N, T) bool, with unified_mask=True only
    sum_i |o_i|       num_tokens                  float     response tokens of the whole mini-batch (dapo.py)
    (rest as grpo.py: R_i rewards (N,), A_i advantages (N,), logp/old_logp/ref_logp/mask (N, T))

Where the paper leaves a choice, and what this file chooses (the peers as read in their code: verl = verl-project/verl
1dda039, 2026-08-22; TRL = huggingface/trl f2cd577, 2026-07-24; AReaL = areal-project/AReaL cbff54d, 2026-08-22;
their losses run beside this file's in tests/test_peers.py and tests/test_cispo.py):
  * The cap: M1 tunes only eps_high and gives no value; it sets eps_low "to a large value" (no lower bound). The cap is
    written 1 + eps_high, as the paper's Eq. 5 writes it and as --clip-high means in every file here (slime, NeMo-RL,
    AReaL and verl do the same). TRL's epsilon_high (and ScaleRL's eps_max) is the cap itself: TRL epsilon_high=5.0
    is clip_high=4.0 here; with epsilon_high unset TRL caps every weight at its epsilon, 0.2. Default eps_high = 4,
    a cap of 5: TRL's recommended value, slime's and AReaL's (1 + 4, its help text's), the middle of ScaleRL's
    {4, 5, 8}, which it found alike. eps_low = 1: the weight's floor is 0, which a ratio never reaches (slime, AReaL's
    help text, NeMo-RL).
  * The normaliser: Eq. 4 divides by the tokens of one prompt's G responses, then averages over prompts; here, as in
    dapo.py (and verl's token-mean; TRL's generation batch, the optimizer step's by default), by the mini-batch's
    response tokens: equal when the prompts' groups hold as many tokens each.
  * The loss value is -sg(r^) A log pi (TRL's, verl's and AReaL's): not a surrogate that is ~0 on-policy, but its
    gradient is sg(r^) A grad log pi. On-policy (mu = 1) the weight is exactly 1 and the gradient is REINFORCE's
    with a token mean, DAPO's at ratio 1 (tests/test_cispo.py): CISPO acts only when the ratio leaves 1 (M1: 16
    off-policy updates per rollout; the cispo recipe: mu = 16). --rollout-lag 1 alone does not move it: the ratio is then
    pi_theta / pi_prox, 1 on the first update, and the staleness enters as the weight below.
  * Clip shares: clip_frac_* count the tokens PPO's clip would drop (A > 0 above the cap, A < 0 below the floor: the
    unified mask's zeros; TRL's cispo_clip_ratio is the high one); capped_frac_* every token whose weight is capped
    (verl's pg_clipfrac and AReaL's clip_mask are their sum).
  * Composition: token_weights (the engine's TIS weights; --rollout-lag's pi_prox/pi_behav) multiply the capped
    weight, AReaL's decoupled form (the cap on pi_theta/pi_prox, then the behaviour weight); ScaleRL folds staleness
    into the ratio itself. The overlong filter masks tokens. The dual clip is refused (NeMo-RL asserts the same).
    C3PO's token budget is refused (--token-budget needs --algorithm c3po), though its 1/Phi would simply replace
    the token count.
"""
from __future__ import annotations

import torch

# The paper's settings, as train.py flags: its recipe in config.RECIPES runs these (a length or batch size scaled to
# the built-in task there, beside the paper's), so an edit here changes what `--recipe` runs.
PAPER = dict(
    clip_low=1.0, clip_high=4.0,  # CISPO change 2 (Eq. 5): the weight capped above at 1 + 4 = 5, no lower bound (1 - 1 = 0)
    loss_agg="token-mean",  # CISPO change 3 (Eq. 4): token-level loss, as dapo.py
    kl_coef=0.0,  # CISPO change 3: M1 has no KL term (Eq. 4)
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


# CISPO change 0: none to the log-probs. grpo.token_logprobs computes every recipe's (the trainer runs it,
# trainer/logprobs.py), so this file carries no copy of it.


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k3 estimator of KL(pi_theta || pi_ref) per token: exp(ref - logp) - (ref - logp) - 1 >= 0 (Schulman, 2020)."""
    d = ref_logp - logp  # (N, T)
    return torch.exp(d) - d - 1


def clipped_surrogate(logp, old_logp, advantages, clip_low: float = PAPER["clip_low"], clip_high: float = PAPER["clip_high"]):
    """Per-token CISPO loss -sg(clip(r, 1-eps_low, 1+eps_high)) A log pi and where the weight is capped, below and above
    (CISPO change 1). advantages (N,) broadcast over T.
    Returns loss (N, T), capped_low (N, T) bool, capped_high (N, T) bool.
    """
    adv = advantages.unsqueeze(-1)  # (N, 1)
    ratio = torch.exp(logp - old_logp)  # (N, T); exactly 1 on the first on-policy update
    # CISPO change 1 (Eq. 4-5): the clipped weight, detached, multiplies A log pi: a capped token keeps its gradient
    weight = torch.clamp(ratio, 1 - clip_low, 1 + clip_high).detach()  # (N, T)
    loss = -weight * adv * logp  # (N, T)
    return loss, ratio < 1 - clip_low, ratio > 1 + clip_high


def dual_clip(loss_tok: torch.Tensor, advantages: torch.Tensor, c: float):
    """CISPO change 5: refused. The dual clip bounds PPO's min() for A < 0 (grpo.dual_clip); CISPO has no min() and its
    weight is capped already (NeMo-RL asserts the same; slime has none, nor have the CISPO losses of AReaL, TRL and
    verl at the commits the module docstring names). config.py stops
    --dual-clip with --algorithm cispo with one line."""
    raise ValueError(f"CISPO has no dual clip (its importance weight is capped already), got dual_clip_c={c}")


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
    unified_mask=False,  # CISPO change 4 (Eq. 6-7): M_it, off as in M1's runs
):
    """The loss to minimise (minus the objective above) and its metrics, for one (micro-)batch.

    Shapes: logp, old_logp, ref_logp, mask (N, T); advantages (N,). Returns (loss, metrics dict of floats).
    token_weights (N, T), detached, multiply the clipped surrogate per token (not the KL term): truncated
    importance sampling between the rollout engine and the trainer (async_rollout.tis_weights); None = all ones.
    dual_clip_c must be 0: CISPO change 5, refused (`dual_clip`).
    TRL 1.16's default KL (use_bias_correction_kl=True) is k3 times r_it, uncapped and not detached: beta * k3 *
    (r_it - 1) more than here, and a different gradient even at r_it = 1. TRL's CISPO divides by tokens only; its
    dr_grpo normaliser is seq-mean-token-sum with num_seqs = N x max_completion_length (tests/test_cispo.py).
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
    metrics["capped_frac_low"] = (capped_low & m).sum().item() / n.item()  # CISPO change 6: weight capped, any A
    metrics["capped_frac_high"] = (capped_high & m).sum().item() / n.item()
    return loss, metrics
