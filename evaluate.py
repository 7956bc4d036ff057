"""Held-out evaluation: greedy accuracy, and avg@k / pass@k over sampled completions.

Notable features
  * Greedy accuracy (temperature 0, one completion per problem) is the number `train.py` reports before and
    after training (`summary.json`: accuracy_before / accuracy_after).
  * avg@n: the mean accuracy over n samples per problem (DAPO reports avg@32 on AIME at temperature 1.0,
    top-p 0.7). pass@k: the unbiased estimator of Chen et al. 2021 (arXiv 2107.03374, Eq. 1),
    pass@k = E_problems[1 - C(n-c, k) / C(n, k)] with c correct out of n >= k samples.
  * Accuracy broken down by difficulty level when the data has levels.
  * Runs on its own on any checkpoint, with train.py's evaluation as its defaults (main):
    python evaluate.py --model runs/default/checkpoint-40      # the accuracy the run printed last
    python evaluate.py --model runs/default/checkpoint-40 --samples 8 --k 1,8
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
             top_p: float = 1.0, max_new_tokens: int = 64, n_show: int = 0, kind: str = "math", template: str = "auto",
             system: str = "", stop: tuple[str, ...] = (), template_kwargs: dict | None = None) -> dict:
    """Greedy accuracy (always) and, when samples > 0, avg@samples and pass@k for each k <= samples. Prompts are
    built and responses end as in training (data.build_prompt with `template` and `template_kwargs`; rollout.finish
    with `stop`); `reward_fn` reads them as in training (a math reward built with thought_open when the prompts leave
    a thought open: data.opens_thought)."""
    prompts = [data.build_prompt(tokenizer, ex.prompt, kind, template, system, template_kwargs) for ex in examples]
    golds = [ex.answer for ex in examples]
    res = {}
    greedy = engine.generate(prompts, 1, SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens, stop=stop))
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
        outs = engine.generate(prompts, samples, SamplingParams(temperature, top_p, max_new_tokens, stop))
        flat = [c.text for group in outs for c in group]
        _, ok, _ = reward_fn(flat, [g for g in golds for _ in range(samples)])
        counts = [sum(ok[i * samples : (i + 1) * samples]) for i in range(len(examples))]
        res[f"avg@{samples}"] = sum(counts) / (samples * len(examples))
        for k in ks:
            if k <= samples:
                res[f"pass@{k}"] = sum(pass_at_k(samples, c, k) for c in counts) / len(examples)
    return res


def main(argv=None):
    """evaluate.py's defaults are train.py's evaluation: the same 400 held-out problems (same seed), greedy + avg@4 /
    pass@4 at T 1.0 sampled with train.py's evaluation seed, 64 new tokens, the fast engine, the math reward, the
    auto template: evaluating a run's final checkpoint with the defaults prints the accuracy the run printed. A run
    with other settings (a recipe's evaluation temperature, --max-new-tokens, --template) is evaluated with the
    same flags; its config.json lists them."""
    ap = data.ArgParser(prog="evaluate.py", description="Evaluate a checkpoint on held-out problems (defaults: train.py's evaluation).",
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--model", default="", help="model directory or hub name ('' = the built-in tiny model)")
    ap.add_argument("--data", default="builtin", help="'builtin' (held-out split) or a dataset file / hub name")
    ap.add_argument("--split", default="test", help="split for hub datasets")
    ap.add_argument("--n-problems", type=int, default=400, help="number of problems (0 = all); train.py --eval-problems")
    ap.add_argument("--samples", type=int, default=4, help="samples per problem for avg@n / pass@k (0 = greedy only)")
    ap.add_argument("--k", default="", help="comma-separated k values for pass@k, each <= --samples (default: 1 and "
                                            "--samples, train.py's)")
    ap.add_argument("--temperature", type=float, default=1.0, help="sampling temperature of avg@n / pass@k")
    ap.add_argument("--top-p", type=float, default=1.0, help="top-p of avg@n / pass@k")
    ap.add_argument("--max-new-tokens", type=int, default=64, help="maximum response length")
    ap.add_argument("--seed", type=int, default=0, help="the run's --seed: which problems, and the sampled evaluation's stream")
    ap.add_argument("--rollout", default="fast", choices=("fast", "hf", "vllm"), help="generation engine")
    ap.add_argument("--reward", default="math", choices=("math", "math-strict", "math-dapo"), help="how answers are graded")
    ap.add_argument("--template", default="auto", choices=tuple(data.TEMPLATES), help="prompt template (train.py --template)")
    ap.add_argument("--system-prompt", default="", help="system prompt for the chat templates")
    ap.add_argument("--chat-template-kwargs", default="", help="JSON object of chat template switches, e.g. "
                                                               "'{\"enable_thinking\": false}' (train.py --chat-template-kwargs)")
    ap.add_argument("--stop", default="", help="stop strings, '||'-separated (train.py --stop)")
    ap.add_argument("--out", default="", help="also write the JSON to this file")
    a = ap.parse_args(argv)
    import codecs

    import torch

    from trainer import lora
    import rollout
    from tools import tiny

    ks = [int(k) for k in a.k.split(",")] if a.k else sorted({1, max(a.samples, 1)})
    if any(k > max(a.samples, 1) for k in ks):
        raise SystemExit(f"error: --k {a.k}: pass@k needs k <= --samples ({a.samples})")
    examples = data.load_dataset(a.data, split=a.split, n=a.n_problems or None, seed=a.seed)  # bad data: before the model
    path = a.model or tiny.get_tiny_model()
    model, tok, path = lora.load_any(path, torch.float32)  # a LoRA checkpoint: merged onto its base
    kind = "math-dapo" if a.reward == "math-dapo" else "math"
    tkw = data.parse_template_kwargs(a.chat_template_kwargs)
    data.check_template(tok, a.template, kind, template_kwargs=tkw)
    thought_open = data.opens_thought(tok, kind, a.template, a.system_prompt, tkw)  # R1-Distill: the prompt opens it
    stop = tuple(codecs.decode(x, "unicode_escape") for x in a.stop.split("||") if x)
    engine = rollout.make_engine(a.rollout, model, tok, model_path=path, seed=a.seed,
                                 max_model_len=512 if not a.model else None)
    torch.manual_seed(a.seed + 7919)  # train.py's evaluation stream (run_eval)
    res = evaluate(engine, tok, examples, MathReward(mode=a.reward, thought_open=thought_open), a.samples, ks,
                   a.temperature, a.top_p, a.max_new_tokens, kind=kind, template=a.template, system=a.system_prompt,
                   stop=stop, template_kwargs=tkw)
    res.pop("samples")
    res = {"model": a.model or path, "data": a.data, "problems": len(examples), **{k: v for k, v in vars(a).items() if k in (
        "samples", "temperature", "top_p", "max_new_tokens", "seed", "rollout", "reward", "template", "stop",
        "chat_template_kwargs")}, "thought_open": thought_open, **res}
    print(json.dumps(res, indent=1))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":  # the guard vLLM's in-process engine needs
    import sys

    sys.exit(data.cli(main))
