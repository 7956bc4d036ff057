"""Entropy regularisation: Ring-lite's static bonus (arXiv 2506.14731, Sec. 3.2, Eq. 4, 6) and Skywork-OR1's adaptive
entropy control (arXiv 2505.22312, Sec. 3.2, Eq. 3.1-3.2). Tests: python -m pytest tests/test_entropy.py -q

    Ring-lite:   L = L_C3PO - alpha * H,   H = 1/D sum_i sum_t m_it H(pi_theta(. | y_i,<t))              (Eq. 4, 6)
    Skywork-OR1: L = L_pg - alpha_k * H  (token mean over the batch, Eq. 3.1)
                 alpha_k = c_k * 1{e_k <= tgt};  c_{k+1} = c_k + Delta if e_k < tgt, c_k - Delta if e_k > tgt  (3.2)

    paper             code                        shape
    H(pi(.|s_t))      entropy                     (N, T)    full-vocabulary entropy (grpo.token_logprobs)
    alpha             coef                        float     5e-4 in Ring-lite; alpha_k from AdaptiveEntropy
    1/D               loss_agg + num_seqs/num_tokens/budget  the same denominators as the policy loss
    e_k               e (AdaptiveEntropy.step)    float     this step's entropy estimate (see `estimate`)
    c_k, c_0          coef_c, c0                  float     c_0 = 0
    tgt, Delta        target, delta               float     0.2; 1e-4 (released scripts) or 5e-3 (paper, Fig. 10)

Where the papers are silent or disagree, and what this file chooses:
  * Sign: Eq. 6 prints + alpha H, but the stated purpose is "encouraging exploration", so the minimised loss gets
    -alpha * H (a bonus); entropy_loss returns that term, to be added to the policy loss.
  * How H is aggregated is unstated in Ring-lite: we use the policy loss's own aggregation and denominators (pass
    the same loss_agg / num_tokens / budget, and the budget mask for C3PO), so both terms scale alike.
  * Entropy estimate e_k (Skywork): the paper estimates "from the rollout buffer"; its code uses the sampled-token
    NLL -mean(old_logp), while the loss term uses the full-vocabulary entropy. Both estimate the same quantity at
    tau = 1 (E[-log p(y)] = H); tgt = 0.2 was tuned on the NLL, so `estimate="nll"` is the default.
  * Timing (`timing`): Skywork's released trainer calls `EntController.update(e)` after the actor update, with e the
    NLL of the rollout just trained on; the next step's loss uses the updated c and the updated flag. So step k uses
    alpha_k = c_k * 1{e_{k-1} < tgt} where c_k already includes e_{k-1}'s update ("update, then use"):
    `timing="code"` (the default), fed e_{k-1}. The paper's Eq. 3.2 uses this step's own estimate before updating:
    alpha_k = c_k * 1{e_k <= tgt}, then c_{k+1} from e_k ("use, then update"): `timing="paper"`, fed e_k. At step 0
    the code timing has no previous estimate: train.py uses alpha_0 = 0 (c_0 = 0 in both paper and scripts).
  * Equality e_k = tgt: the paper turns the bonus on (<=) and leaves c unchanged (neither case of Eq. 3.2); the code
    turns it off (<) and decreases c. `strict=False` (default) is the paper, `strict=True` the code.
  * c is clamped to [c_min, c_max] = [0, 0.005] after each update, as the released code does (the paper has no clamp;
    without one c goes negative while entropy sits above the target). The initial c_0 is not clamped (nor is it in the
    code). The scripts' Delta = 1e-4 is the default.
"""
from __future__ import annotations

import torch


def aggregate(
    loss_tok: torch.Tensor, mask: torch.Tensor, mode: str, num_seqs: float | None = None, num_tokens: float | None = None,
    budget: float | None = None,
):
    """grpo.aggregate plus C3PO's "budget" mode (1/budget * sum_i sum_t m_it l_it); see grpo.py / c3po.py."""
    mask = mask.to(loss_tok.dtype)
    if mode == "budget":
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
        raise ValueError(f"unknown loss aggregation {mode!r}")
    denom = num_seqs if num_seqs is not None else (mask.sum(-1) > 0).sum().clamp(min=1)  # non-empty rows
    return per_seq.sum() / denom


def entropy_loss(entropy, mask, coef: float = 5e-4, loss_agg: str = "token-mean", num_seqs=None, num_tokens=None,
                 budget=None):
    """-coef * H, aggregated like the policy loss; add it to the loss being minimised (entropy (N, T), mask (N, T)).

    coef: Ring-lite's static alpha = 5e-4, or AdaptiveEntropy.step(e). Returns (term, metrics dict of floats).
    """
    h = aggregate(entropy, mask, loss_agg, num_seqs, num_tokens, budget)
    m = mask.bool()
    return -coef * h, {"entropy": (entropy[m].mean().item() if m.any() else 0.0), "entropy_coef": coef}


def sampled_nll(logp: torch.Tensor, mask: torch.Tensor) -> float:
    """-mean over response tokens of log pi(y_t): Skywork-OR1 code's entropy estimate (`actor/entropy_loss`)."""
    m = mask.to(logp.dtype)
    return (-(logp * m).sum() / m.sum().clamp(min=1)).item()


def mean_entropy(entropy: torch.Tensor, mask: torch.Tensor) -> float:
    """Token mean of the full-vocabulary entropy (N, T) over the mask."""
    m = mask.to(entropy.dtype)
    return ((entropy * m).sum() / m.sum().clamp(min=1)).item()


class AdaptiveEntropy:
    """Skywork-OR1's controller (Eq. 3.2): the bonus switches on only below `target`, with a coefficient that ramps.

    Call `alpha = ctrl.step(e)` once per training step, before the loss, with e = ctrl.measure(old_logp, mask) of the
    previous rollout (timing="code") or of this step's rollout (timing="paper"), then add
    entropy_loss(entropy, mask, alpha, ...) to the policy loss.
    """

    def __init__(self, target: float = 0.2, delta: float = 1e-4, c0: float = 0.0, c_min: float = 0.0,
                 c_max: float = 0.005, timing: str = "paper", strict: bool = False, estimate: str = "nll"):
        if estimate not in ("nll", "entropy"):
            raise ValueError(f"estimate must be 'nll' or 'entropy', got {estimate!r}")
        if timing not in ("code", "paper"):
            raise ValueError(f"timing must be 'code' or 'paper', got {timing!r}")
        self.target, self.delta, self.c_min, self.c_max = target, delta, c_min, c_max
        self.timing, self.strict, self.estimate = timing, strict, estimate
        self.c = c0  # not clamped: Skywork's EntController clamps only after an update
        self.last_e, self.last_alpha, self.steps = None, 0.0, 0

    def measure(self, logp=None, mask=None, entropy=None) -> float:
        """e_k from the rollout batch: sampled-token NLL of old_logp, or the mean full-vocabulary entropy."""
        if self.estimate == "nll":
            return sampled_nll(logp, mask)
        return mean_entropy(entropy, mask)

    def _on(self, e: float) -> bool:
        return e < self.target if self.strict else e <= self.target

    def _update(self, e: float):
        if e < self.target:
            self.c += self.delta
        elif e > self.target or self.strict:  # equality: the code decreases c, the paper leaves it
            self.c -= self.delta
        self.c = min(max(self.c, self.c_min), self.c_max)

    def step(self, e: float) -> float:
        """alpha for this step's loss. paper: c_k * 1{e_k on}, then c_{k+1} from e_k (e = this rollout's estimate).
        code: c from e's update, then c * 1{e on} (e = the previous rollout's estimate)."""
        if self.timing == "code":
            self._update(e)
        alpha = self.c * float(self._on(e))
        if self.timing == "paper":
            self._update(e)
        self.last_e, self.last_alpha, self.steps = e, alpha, self.steps + 1
        return alpha

    def metrics(self) -> dict:
        return {"policy/entropy_estimate": self.last_e, "policy/entropy_coef": self.last_alpha,
                "policy/entropy_coef_c": self.c}

    def state_dict(self) -> dict:
        return {"c": self.c, "last_e": self.last_e, "last_alpha": self.last_alpha, "steps": self.steps}

    def load_state_dict(self, state: dict):
        self.c, self.last_e = state["c"], state["last_e"]
        self.last_alpha, self.steps = state["last_alpha"], state["steps"]
