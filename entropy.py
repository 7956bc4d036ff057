"""Entropy regularisation: Ring-lite's static bonus (arXiv 2506.14731, Sec. 3.2, Eq. 4, 6) and Skywork-OR1's adaptive
entropy control (arXiv 2505.22312, Sec. 3.2, Eq. 3.1-3.2). Tests: python -m pytest tests/test_entropy.py -q

    Ring-lite:   L = L_C3PO - alpha * H,   H = 1/D sum_i sum_t m_it H(pi_theta(. | y_i,<t))              (Eq. 4, 6)
    Skywork-OR1: L = L_pg - alpha_k * H  (token mean over the batch, Eq. 3.1)
                 alpha_k = c_k * 1{e_k <= tgt};  c_{k+1} = c_k + Delta if e_k < tgt, c_k - Delta if e_k > tgt  (3.2)

    paper             code                        shape
    H(pi(.|s_t))      entropy                     (N, T)    full-vocabulary entropy (grpo.token_logprobs)
    alpha             coef                        float     5e-4 in Ring-lite; alpha_k from AdaptiveEntropy
    1/D               aggregate + loss_agg, ...   the policy loss's: the run's idea file's aggregate, its denominators
    e_k               e (AdaptiveEntropy.coef)    float     the entropy estimate alpha_k follows (`timing`)
    c_k, c_0          coef_c, c0                  float     c_0 = 0
    tgt, Delta        target, delta               float     0.2; 1e-4 (released scripts) or 5e-3 (paper, Fig. 10)

Where the papers are silent or disagree, and what this file chooses:
  * Sign: Eq. 6 prints + alpha H, but the stated purpose is "encouraging exploration", so the minimised loss gets
    -alpha * H (a bonus); entropy_loss returns that term, to be added to the policy loss.
  * How H is aggregated is unstated in Ring-lite: we use the policy loss's own aggregation and denominators (the
    run's idea file's `aggregate` with the same loss_agg / num_tokens / budget, and the budget mask for C3PO), so both
    terms scale alike.
  * Entropy estimate e_k (Skywork): the paper estimates "from the rollout buffer"; its code uses the sampled-token
    NLL -mean(old_logp), while the loss term uses the full-vocabulary entropy. Both estimate the same quantity at
    tau = 1 (E[-log p(y)] = H); tgt = 0.2 was tuned on the NLL, so e_k is the NLL: the trainer hands the controller
    log pi_old of the rollout's sampled tokens (`coef`'s this_rollout, or `observe` per micro-batch: the timing's).
  * Timing (`timing`): Skywork's released trainer calls `EntController.update(e)` after the actor update, with e the
    NLL of the rollout just trained on; the next step's loss uses the updated c and the updated flag. So step k uses
    alpha_k = c_k * 1{e_{k-1} < tgt} where c_k already includes e_{k-1}'s update ("update, then use"):
    `timing="code"` (train.py's default, --entropy-timing), fed e_{k-1}: observed during the previous step's update,
    from the log-probs its first pass computes anyway. The paper's Eq. 3.2 uses this step's own estimate before
    updating: alpha_k = c_k * 1{e_k <= tgt}, then c_{k+1} from e_k ("use, then update"): `timing="paper"` (the
    class's default), fed e_k: observed before the update, by one extra forward pass. At step 0 the code timing has
    no previous estimate: alpha_0 = 0 (c_0 = 0 in both paper and scripts).
  * Equality e_k = tgt: the paper turns the bonus on (<=) and leaves c unchanged (neither case of Eq. 3.2); the code
    turns it off (<) and decreases c. `strict=False` (default) is the paper, `strict=True` the code.
  * c is clamped to [c_min, c_max] = [0, 0.005] after each update, as the released code does (the paper has no clamp;
    without one c goes negative while entropy sits above the target). The initial c_0 is not clamped (nor is it in the
    code). The scripts' Delta = 1e-4 is the default.
"""
from __future__ import annotations

import torch


def entropy_loss(entropy, mask, coef: float, aggregate, loss_agg: str = "token-mean", num_seqs=None, num_tokens=None,
                 **budget):
    """-coef * H, aggregated as the policy loss is; add it to the loss being minimised (entropy (N, T), mask (N, T)).

    coef: Ring-lite's static alpha = 5e-4, or Skywork-OR1's alpha_k (AdaptiveEntropy.coef). aggregate: the run's idea
    file's (grpo.aggregate; c3po.aggregate, whose "budget" mode takes budget=Phi), with the policy loss's loss_agg and
    denominators, so both terms scale alike.
    """
    return -coef * aggregate(entropy, mask, loss_agg, num_seqs, num_tokens, **budget)


class AdaptiveEntropy:
    """Skywork-OR1's controller (Eq. 3.2): the bonus switches on only below `target`, with a coefficient that ramps.

    One call per training step, before the update: `alpha, metrics = ctrl.coef(this_rollout, reduce)`, then
    entropy_loss(entropy, mask, alpha, ...) joins the policy loss. The controller keeps its estimate e and its timing:
    timing="paper" takes e_k from this step's rollout under pi_old (`this_rollout()`: its sampled tokens' log-probs,
    one extra forward pass); timing="code" takes e_{k-1}, the tokens handed to `observe` during the previous update.
    """

    def __init__(self, target: float = 0.2, delta: float = 1e-4, c0: float = 0.0, c_min: float = 0.0,
                 c_max: float = 0.005, timing: str = "paper", strict: bool = False):
        if timing not in ("code", "paper"):
            raise ValueError(f"timing must be 'code' or 'paper', got {timing!r}")
        self.target, self.delta, self.c_min, self.c_max = target, delta, c_min, c_max
        self.timing, self.strict = timing, strict
        self.c = c0  # not clamped: Skywork's EntController clamps only after an update
        self.last_e, self.last_alpha, self.steps = None, 0.0, 0
        self.nll_sum, self.nll_tokens, self.e = 0.0, 0.0, None  # e's sums since the last estimate; the last e

    def coef(self, this_rollout=list, reduce=None) -> tuple[float, dict]:
        """alpha_k for this step's loss and the step's metrics. this_rollout() -> log pi_old of this rollout's sampled
        tokens, (len_i,) per response: called under timing="paper" only. reduce sums [nll, tokens] over processes
        (list -> list). No estimate (nothing observed yet): alpha 0, c does not move."""
        if self.timing == "paper":
            for logp in this_rollout():
                self._add(logp, torch.ones_like(logp))
        e = self.estimate(reduce)  # e_k (paper) or e_{k-1} (code)
        if e is None:
            return 0.0, {"policy/entropy_coef": 0.0}
        return self.step(e), self.metrics()

    def observe(self, logp: torch.Tensor, mask: torch.Tensor) -> None:
        """timing="code": log pi_old (N, T) of the sampled tokens of mask (N, T) in the update's first pass over the
        rollout, the next step's e (ignored under "paper"). A step's micro-batches (and, through `reduce`, processes)
        add up to the rollout's -mean log pi_old (Skywork's code's `actor/entropy_loss`)."""
        if self.timing == "code":
            self._add(logp, mask)

    def _add(self, logp: torch.Tensor, mask: torch.Tensor) -> None:
        m = mask.to(logp.dtype)
        self.nll_sum += -(logp * m).sum().item()
        self.nll_tokens += m.sum().item()

    def estimate(self, reduce=None) -> float | None:
        """e = -mean log pi_old over the tokens observed since the last call; the sums then start over. Nothing
        observed: "paper" gives None; "code" keeps the last e (a step whose update had no response observed nothing)."""
        sums = [self.nll_sum, self.nll_tokens]
        self.nll_sum, self.nll_tokens = 0.0, 0.0
        if reduce is not None:
            sums = reduce(sums)
        if sums[1]:
            self.e = sums[0] / sums[1]
        elif self.timing == "paper":
            return None
        return self.e

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
        return {"c": self.c, "last_e": self.last_e, "last_alpha": self.last_alpha, "steps": self.steps,
                "nll_sum": self.nll_sum, "nll_tokens": self.nll_tokens, "e": self.e}

    def load_state_dict(self, state: dict):
        self.c, self.last_e = state["c"], state["last_e"]
        self.last_alpha, self.steps = state["last_alpha"], state["steps"]
        self.nll_sum, self.nll_tokens, self.e = state["nll_sum"], state["nll_tokens"], state["e"]
