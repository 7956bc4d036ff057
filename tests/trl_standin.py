"""TRL 1.16's own `GRPOTrainer._compute_loss`, called on a minimal stand-in object (tests/test_gspo.py, test_cispo.py).

A GRPOTrainer needs a model, a dataset, reward functions and a generation set-up before its loss can run; the loss
itself reads a few attributes, which the stand-in sets from a real `GRPOConfig` the way `GRPOTrainer.__init__` does
(epsilon_low = epsilon; epsilon_high = epsilon_high, or epsilon when unset; ...). The log-probs are handed in: the
stand-in's `_get_per_token_logps_and_entropies` returns them, so what is compared is the loss, not the forward pass.
One process, no gradient accumulation, one micro-batch per optimizer step: TRL's num_items_in_batch is the batch's
token count.
"""
import collections
import tempfile
import types

import torch


def trl_loss(logp, old_logp, advantages, mask, ref_logp=None, **config):
    """TRL's loss and the metrics it logged, for log-probs (N, T), advantages (N,), mask (N, T) and GRPOConfig fields."""
    from trl import GRPOConfig, GRPOTrainer

    args = GRPOConfig(output_dir=tempfile.mkdtemp(prefix="trl-standin-"), use_cpu=True, bf16=False, report_to=[], **config)
    n, t = logp.shape
    accelerator = types.SimpleNamespace(num_processes=1, reduce=lambda x, reduction: x, gather=lambda x: x,
                                        gather_for_metrics=lambda x: x)
    stand_in = types.SimpleNamespace(
        args=args, loss_type=args.loss_type, importance_sampling_level=args.importance_sampling_level, beta=args.beta,
        epsilon_low=args.epsilon, epsilon_high=args.epsilon_high if args.epsilon_high is not None else args.epsilon,
        top_entropy_quantile=args.top_entropy_quantile, off_policy_mask_threshold=args.off_policy_mask_threshold,
        use_vllm=args.use_vllm, vllm_importance_sampling_correction=args.vllm_importance_sampling_correction,
        max_completion_length=args.max_completion_length, entropy_coef=args.entropy_coef,
        use_adaptive_entropy=args.use_adaptive_entropy,
        _entropy_bonus_enabled=args.entropy_coef != 0.0 or args.use_adaptive_entropy, aux_loss_enabled=False,
        model=types.SimpleNamespace(training=True), current_gradient_accumulation_steps=args.gradient_accumulation_steps,
        accelerator=accelerator, _metrics={"train": collections.defaultdict(list), "eval": collections.defaultdict(list)},
        _get_per_token_logps_and_entropies=lambda *a, **k: (logp, torch.zeros_like(logp), None))
    inputs = {"prompt_ids": torch.zeros(n, 1, dtype=torch.long), "prompt_mask": torch.ones(n, 1, dtype=torch.long),
              "completion_ids": torch.zeros(n, t, dtype=torch.long), "completion_mask": mask, "advantages": advantages,
              "old_per_token_logps": old_logp, "num_items_in_batch": mask.sum()}
    if ref_logp is not None:
        inputs["ref_per_token_logps"] = ref_logp
    loss = GRPOTrainer._compute_loss(stand_in, None, inputs)
    return loss, {k: v[-1] for k, v in stand_in._metrics["train"].items()}
