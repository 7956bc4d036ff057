"""Held-out evaluation: greedy accuracy, and avg@k / pass@k over sampled completions.

Notable features
  * Greedy accuracy (temperature 0, one completion per problem) is the number `train.py` reports before and
    after training (`summary.json`: accuracy_before / accuracy_after).
  * avg@n: the mean accuracy over n samples per problem (DAPO reports avg@32 on AIME at temperature 1.0,
    top-p 0.7). pass@k: the unbiased estimator of Chen et al. 2021 (arXiv 2107.03374, Eq. 1),
    pass@k = E_problems[1 - C(n-c, k) / C(n, k)] with c correct out of n >= k samples.
  * Accuracy broken down by difficulty level when the data has levels.
  * Runs on its own on any checkpoint: python evaluate.py --model runs/default/checkpoint-100 --samples 8 --k 1,8
    (a LoRA checkpoint, train.py --lora-rank R, is merged onto the base model its adapter_config.json names)
"""
from __future__ import annotations

import argparse
import json
import math
from collections import defaultdict

import data
from reward import MathReward
from rollout import SamplingParams


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c are correct (Chen et al. 2021)."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples, got {n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def evaluate(engine, tokenizer, examples, reward_fn, samples: int = 0, ks=(1,), temperature: float = 1.0,
             top_p: float = 1.0, max_new_tokens: int = 64, n_show: int = 0, kind: str = "math") -> dict:
    """Greedy accuracy (always) and, when samples > 0, avg@samples and pass@k for each k <= samples."""
    prompts = [data.build_prompt(tokenizer, ex.prompt, kind) for ex in examples]
    golds = [ex.answer for ex in examples]
    res = {}
    greedy = engine.generate(prompts, 1, SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens))
    texts = [g[0].text for g in greedy]
    rewards, correct, _ = reward_fn(texts, golds)
    res["accuracy"] = sum(correct) / len(correct)
    if kind == "code":  # the partial credit of MiMo's strict / soft test rewards (= accuracy for all-or-nothing)
        res["score"] = sum(rewards) / len(rewards)
    res["response_length"] = sum(g[0].length for g in greedy) / len(greedy)
    by_level = defaultdict(list)
    for ex, ok in zip(examples, correct):
        if ex.level is not None:
            by_level[ex.level].append(ok)
    for lvl, v in sorted(by_level.items()):
        res[f"accuracy_level{lvl}"] = sum(v) / len(v)
    res["samples"] = [
        {"prompt": ex.prompt, "answer": ex.answer, "completion": t, "correct": ok}
        for ex, t, ok in list(zip(examples, texts, correct))[:n_show]
    ]
    if samples > 0:
        outs = engine.generate(prompts, samples, SamplingParams(temperature, top_p, max_new_tokens))
        flat = [c.text for group in outs for c in group]
        _, ok, _ = reward_fn(flat, [g for g in golds for _ in range(samples)])
        counts = [sum(ok[i * samples : (i + 1) * samples]) for i in range(len(examples))]
        res[f"avg@{samples}"] = sum(counts) / (samples * len(examples))
        for k in ks:
            if k <= samples:
                res[f"pass@{k}"] = sum(pass_at_k(samples, c, k) for c in counts) / len(examples)
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description="Evaluate a checkpoint on held-out problems.")
    ap.add_argument("--model", default=None, help="model path or hub name (default: the built-in tiny model)")
    ap.add_argument("--data", default="builtin", help="'builtin' (held-out split) or a dataset file / hub name")
    ap.add_argument("--split", default="test", help="split for hub datasets")
    ap.add_argument("--n-problems", type=int, default=500, help="number of problems (0 = all)")
    ap.add_argument("--samples", type=int, default=0, help="samples per problem for avg@n / pass@k (0 = greedy only)")
    ap.add_argument("--k", default="1", help="comma-separated k values for pass@k")
    ap.add_argument("--temperature", type=float, default=1.0, help="sampling temperature for avg@n / pass@k")
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rollout", default="hf", help="generation engine: hf or vllm")
    a = ap.parse_args(argv)
    if a.rollout not in ("hf", "vllm"):
        raise SystemExit(f"error: --rollout: {a.rollout!r} is not 'hf' or 'vllm'")
    import torch

    import lora
    import rollout
    import tiny

    examples = data.load_dataset(a.data, split=a.split, n=a.n_problems or None, seed=a.seed)  # bad data: before the model
    path = a.model or tiny.get_tiny_model()
    model, tok, path = lora.load_any(path, torch.float32)  # a LoRA checkpoint: merged onto its base
    torch.manual_seed(a.seed)
    engine = rollout.make_engine(a.rollout, model, tok, model_path=path, seed=a.seed,
                                 max_model_len=512 if not a.model else None)
    res = evaluate(engine, tok, examples, MathReward(), a.samples, [int(k) for k in a.k.split(",")],
                   a.temperature, a.top_p, a.max_new_tokens)
    res.pop("samples")
    print(json.dumps(res, indent=1))


if __name__ == "__main__":  # the guard vLLM's in-process engine needs
    import sys

    sys.exit(data.cli(main))
