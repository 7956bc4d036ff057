"""Held-out evaluation: greedy accuracy, and avg@k / pass@k over sampled completions.

Notable features
  * Greedy accuracy (temperature 0, one completion per problem) is the number `train.py` reports before and
    after training (`summary.json`: accuracy_before / accuracy_after).
  * avg@n: the mean accuracy over n samples per problem (DAPO reports avg@32 on AIME at temperature 1.0,
    top-p 0.7). pass@k: the unbiased estimator of Chen et al. 2021 (arXiv 2107.03374, Eq. 1),
    pass@k = E_problems[1 - C(n-c, k) / C(n, k)] with c correct out of n >= k samples.
  * Accuracy broken down by difficulty level when the data has levels.
  * Runs on its own on any checkpoint (main). A checkpoint carries its run's settings (run_config.json): with no
    other flag evaluate.py repeats the run's final evaluation (its problems, seed, reward, template, length, and the
    recipe's k / T / top-p) and prints the accuracy, avg@k and pass@k the run printed last; a flag given wins:
    python evaluate.py --model runs/default/checkpoint-40      # the accuracy the run printed last
    python evaluate.py --model runs/dapo                       # a run directory: its newest checkpoint
    python evaluate.py --model runs/default/checkpoint-40 --samples 8 --k 1,8
    (a LoRA checkpoint, train.py --lora-rank R, is merged onto the base model its adapter_config.json names)
  * A progress bar while it generates: completions done and their running accuracy (train.py's evaluations too).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import time
from collections import defaultdict

from engines.stops import read_stops
from reward import MathReward
from rollout import SamplingParams
from tasks.countdown import CountdownReward
from tasks.load import load_dataset
from tasks.templates import TEMPLATES, build_prompt, check_template, opens_thought, parse_template_kwargs
from tools.cli import ArgParser, cli, set_threads


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c are correct (Chen et al. 2021)."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples, got {n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


@contextlib.contextmanager
def progress(engine, tokenizer, golds, n: int, reward_fn, desc: str):
    """A progress bar while `engine` generates n completions for each of len(golds) problems: completions done and
    the running accuracy of those (graded as they finish, through the engine's `progress` hook: the hf and fast
    engines). Display only, on the main process: the results are graded again, as before, from what generate returns."""
    from runs import progress_bar

    if not hasattr(engine, "generate") or os.environ.get("RANK", "0") != "0" or tokenizer is None:
        yield
        return
    bar = progress_bar(total=len(golds) * n, desc=desc, unit=" problems" if n == 1 else " completions", leave=False,
               dynamic_ncols=True, mininterval=0.5)
    seen, right, todo, last = 0, 0, [], [time.time()]

    def grade():
        nonlocal seen, right
        texts = [tokenizer.decode(ids, skip_special_tokens=True) for _, ids in todo]
        _, ok, _ = reward_fn(texts, [golds[row // n] for row, _ in todo])
        seen, right = seen + len(ok), right + sum(ok)
        bar.update(len(ok))
        bar.set_postfix(acc=f"{right / seen:.3f}")
        todo.clear()
        last[0] = time.time()

    def hook(rows):
        todo.extend(rows)
        if time.time() - last[0] > 0.5:
            grade()

    before = getattr(engine, "progress", None)
    engine.progress = hook
    try:
        yield
        if todo:
            grade()
    finally:
        engine.progress = before
        bar.close()


def evaluate(engine, tokenizer, examples, reward_fn, samples: int = 0, ks=(1,), temperature: float = 1.0,
             top_p: float = 1.0, max_new_tokens: int = 64, n_show: int = 0, kind: str = "math", template: str = "auto",
             system: str = "", stop: tuple[str, ...] = (), template_kwargs: dict | None = None) -> dict:
    """Greedy accuracy (always) and, when samples > 0, avg@samples and pass@k for each k <= samples. Prompts are
    built and responses end as in training (tasks.templates.build_prompt with `template` and `template_kwargs`;
    engines.stops.finish with `stop`); `reward_fn` reads them as in training (a math reward built with thought_open
    when the prompts leave a thought open: tasks.templates.opens_thought)."""
    prompts = [build_prompt(tokenizer, ex.prompt, kind, template, system, template_kwargs) for ex in examples]
    golds = [ex.answer for ex in examples]
    res = {}
    with progress(engine, tokenizer, golds, 1, reward_fn, "greedy"):
        greedy = engine.generate(prompts, 1, SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens, stop=stop))
    texts = [g[0].text for g in greedy]
    cut = [g[0].truncated for g in greedy]  # the engine's flag: a response that hit the limit (reward.py, rule 5)
    rewards, correct, _ = reward_fn(texts, golds, truncated=cut)
    res["accuracy"] = sum(correct) / len(correct)
    anywhere = getattr(reward_fn, "anywhere", None)  # the right answer at the end in any form (tasks/rg.py): the format's share
    if anywhere:
        res["accuracy_anywhere"] = sum(anywhere(texts, golds)) / len(texts)
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
        {"prompt": ex.prompt, "answer": ex.answer, "completion": t, "truncated": c, "correct": ok}
        for ex, t, c, ok in list(zip(examples, texts, cut, correct))[:n_show]
    ]
    if samples > 0:
        with progress(engine, tokenizer, golds, samples, reward_fn, f"avg@{samples}"):
            outs = engine.generate(prompts, samples, SamplingParams(temperature, top_p, max_new_tokens, stop))
        flat = [c.text for group in outs for c in group]
        _, ok, _ = reward_fn(flat, [g for g in golds for _ in range(samples)],
                             truncated=[c.truncated for group in outs for c in group])
        counts = [sum(ok[i * samples : (i + 1) * samples]) for i in range(len(examples))]
        res[f"avg@{samples}"] = sum(counts) / (samples * len(examples))
        if anywhere:
            res[f"avg@{samples}_anywhere"] = sum(anywhere(flat, [g for g in golds for _ in range(samples)])) / len(flat)
        for k in ks:
            if k <= samples:
                res[f"pass@{k}"] = sum(pass_at_k(samples, c, k) for c in counts) / len(examples)
    return res


# evaluate.py's settings and the run's config key each comes from: a checkpoint written by train.py carries its run's
# settings (run_config.json), and those are the defaults; a flag given on the command line still wins.
FROM_RUN = {"data": "eval_data", "split": "eval_split", "eval_problems": "eval_problems", "samples": "eval_samples",
            "temperature": "eval_temperature", "top_p": "eval_top_p", "max_new_tokens": "max_new_tokens", "seed": "seed",
            "rollout": "rollout", "reward": "reward", "template": "template", "system_prompt": "system_prompt", "stop": "stop",
            "chat_template_kwargs": "chat_template_kwargs"}
DEFAULTS = {"data": "builtin", "split": "test", "eval_problems": 400, "samples": 4, "temperature": 1.0, "top_p": 1.0,
            "max_new_tokens": 64, "seed": 0, "rollout": "auto", "reward": "math", "template": "auto", "system_prompt": "",
            "stop": "", "chat_template_kwargs": ""}  # train.py's defaults: a model that no run wrote is evaluated as train.py's default run would


def resolve_model(path: str) -> tuple[str, dict | None]:
    """(model directory, its run's settings or None). A run directory (train.py --output-dir) means its newest
    checkpoint; a checkpoint's settings are its run_config.json (train.py writes one into every checkpoint)."""
    import os

    import runs
    from tools.smollm2 import named_model

    path = named_model(path)
    if path and os.path.isfile(os.path.join(path, "config.json")) and runs.checkpoints(path) and not any(
            os.path.exists(os.path.join(path, f)) for f in ("tokenizer_config.json", "adapter_config.json")):
        path = runs.checkpoints(path)[-1]  # the run directory: its newest checkpoint
    elif path and os.path.isfile(os.path.join(path, "config.json")) and "recipe" in json.load(open(os.path.join(path, "config.json"))):
        raise SystemExit(f"error: --model {path}: a run directory with no checkpoint-N in it (its run stopped before "
                         "its first checkpoint): nothing to evaluate")
    cfg_path = os.path.join(path, "run_config.json") if path else ""
    if cfg_path and os.path.exists(cfg_path):
        with open(cfg_path) as f:
            return path, json.load(f)
    return path, None


def main(argv=None):
    """Evaluate a model on held-out problems, with train.py's evaluation.

    A checkpoint written by train.py (checkpoint-N, or the run directory: its newest checkpoint) is evaluated with
    its run's settings (run_config.json): the held-out data, split, problems and seed, the reward, the template,
    system prompt and stop strings, max new tokens, and the evaluation's samples, T and top-p; with no other flag it
    prints the accuracy, avg@k and pass@k the run printed last. Any other model gets train.py's defaults (400
    problems of the built-in task, greedy + avg@4 / pass@4 at T 1.0, 64 new tokens, the fast engine). A flag given
    on the command line wins over both. The settings used are printed (stderr) before the evaluation."""
    from config import add_threads
    from trainer.checks import PROBABILITY, above, at_least, number, vllm_installed  # train.py's checks

    # each help names its default (the run's setting, else train.py's): no ArgumentDefaultsHelpFormatter
    ap = ArgParser(prog="evaluate.py", description="Evaluate a checkpoint on held-out problems (defaults: its run's "
                        "evaluation, read from the checkpoint; train.py's for any other model).")
    count = number(int, at_least(0))
    ap.add_argument("--model", default="", help="checkpoint directory, run directory (its newest checkpoint), model "
                    "directory or hub name ('' = the built-in tiny model)")
    ap.add_argument("--data", help="'builtin' (held-out split) or a dataset file / hub name (train.py --eval-data; "
                    "default: the run's, else builtin)")
    ap.add_argument("--split", help="split for hub datasets (train.py --eval-split; default: the run's, else test)")
    ap.add_argument("--eval-problems", "--n-problems", dest="eval_problems", type=count,
                    help="number of problems, 0 = all (train.py --eval-problems; default: the run's, else 400)")
    ap.add_argument("--samples", type=count, help="samples per problem for avg@n / pass@k, 0 = greedy only (train.py "
                    "--eval-samples; default: the run's, else 4)")
    ap.add_argument("--k", default="", help="comma-separated k values for pass@k, each <= --samples (default: 1 and "
                                            "--samples, train.py's)")
    greedy = "(the greedy accuracy, temperature 0, is always measured; --samples 0 measures it alone)"
    ap.add_argument("--temperature", type=number(float, above(0, greedy)), help="sampling temperature of "
                    "avg@n / pass@k (train.py --eval-temperature; default: the run's, else 1.0)")
    ap.add_argument("--top-p", type=number(float, PROBABILITY), help="top-p of avg@n / pass@k (train.py --eval-top-p; default: the run's, else 1.0)")
    ap.add_argument("--max-new-tokens", type=number(int, at_least(1)), help="maximum response length (default: the run's, else 64)")
    ap.add_argument("--seed", type=count, help="the run's --seed: which problems, and the sampled evaluation's stream "
                    "(default: the run's, else 0)")
    ap.add_argument("--rollout", choices=("auto", "fast", "hf", "vllm"), help="generation engine (default: the run's, "
                    "else auto: fast on the CPU, hf on a GPU)")
    ap.add_argument("--reward", choices=("math", "math-strict", "math-dapo", "countdown"),
                    help="how answers are graded (default: the run's, else math)")
    ap.add_argument("--template", choices=tuple(TEMPLATES), help="prompt template (train.py --template; default: "
                    "the run's, else auto)")
    ap.add_argument("--system-prompt", help="system prompt for the chat templates (default: the run's, else none)")
    ap.add_argument("--chat-template-kwargs", help="JSON object of chat template switches, e.g. "
                    "'{\"enable_thinking\": false}' (train.py --chat-template-kwargs; default: the run's, else none)")
    ap.add_argument("--stop", help="stop strings, '||'-separated (train.py --stop; default: the run's, else none)")
    ap.add_argument("--out", default="", help="also write the JSON to this file (default: none)")
    add_threads(ap)  # train.py's --threads
    a = ap.parse_args(argv)
    if a.out and os.path.isdir(a.out):
        raise SystemExit(f"error: --out {a.out}: a directory, not a file")
    if a.model and os.path.isfile(a.model):
        raise SystemExit(f"error: --model {a.model}: a file, not a model, checkpoint or run directory")
    if a.rollout and vllm_installed(a.rollout):
        raise SystemExit(f"error: --rollout vllm: {vllm_installed(a.rollout)}")
    import sys

    import torch

    set_threads(a.threads)
    from trainer import lora
    from trainer.stages import kind_of
    import rollout
    from tools import tiny

    model_dir, run = resolve_model(a.model)
    if run is not None and run.get("stages"):
        raise SystemExit(f"error: --model {a.model}: its run has --stages ({run['stages']!r}): evaluate.py evaluates one "
                         "task; pass --data, --reward and --max-new-tokens for the stage to evaluate")
    if run is not None and run.get("reward") not in (None, "math", "math-strict", "math-dapo") and a.reward is None:
        raise SystemExit(f"error: --model {a.model}: its run's reward {run['reward']!r} is not a math reward "
                         "(evaluate.py grades math answers)")
    given = {k: v for k, v in vars(a).items() if k in FROM_RUN and v is not None}
    st = {k: (run.get(FROM_RUN[k], DEFAULTS[k]) if run is not None else DEFAULTS[k]) for k in FROM_RUN}
    st.update(given)
    if str(st["data"]).startswith("builtin"):
        st["split"] = "test"  # train.py's held-out split of the built-in task
    source = f"the run's settings ({model_dir}/run_config.json)" if run is not None else "train.py's defaults"
    shown = ", ".join(f"{k.replace('_', '-')} {st[k]!r}" for k in FROM_RUN)
    over = "; given: " + ", ".join(f"--{k.replace('_', '-')}" for k in given) if given else ""
    samples = st["samples"]
    try:
        ks = [int(k) for k in a.k.split(",")] if a.k else sorted({1, max(samples, 1)})
    except ValueError:
        raise SystemExit(f"error: --k {a.k!r}: comma-separated whole numbers, e.g. 1,4") from None
    if any(k < 1 for k in ks) or any(k > max(samples, 1) for k in ks):
        raise SystemExit(f"error: --k {a.k}: pass@k needs 1 <= k <= --samples ({samples})")
    kind = kind_of(st["reward"])
    examples = load_dataset(st["data"], split=st["split"], n=st["eval_problems"] or None, seed=st["seed"],
                            schema="countdown" if kind == "countdown" else None)  # bad data: before the model
    path = model_dir or tiny.get_tiny_model()
    model, tok, path = lora.load_any(path, torch.float32)  # a LoRA checkpoint: merged onto its base
    tkw = parse_template_kwargs(st["chat_template_kwargs"])
    check_template(tok, st["template"], kind, template_kwargs=tkw)
    # (after the model's checks: a bad --model is one error line, alone)
    print(f"evaluating {model_dir or 'the built-in tiny model'} with {source}: {shown}{over}", file=sys.stderr, flush=True)
    thought_open = opens_thought(tok, kind, st["template"], st["system_prompt"], tkw)  # R1-Distill: the prompt opens it
    stop = read_stops(st["stop"])
    builtin_model = not a.model or (run is not None and not run.get("model"))  # train.py's max_model_len for its tiny model
    engine = rollout.make_engine(st["rollout"], model, tok, model_path=path, seed=st["seed"],
                                 max_model_len=512 if builtin_model else None)
    torch.manual_seed(st["seed"] + 7919)  # train.py's evaluation stream (run_eval)
    reward_fn = (CountdownReward(thought_open=thought_open) if kind == "countdown" else
                 MathReward(mode=st["reward"], thought_open=thought_open))
    res = evaluate(engine, tok, examples, reward_fn, samples, ks,
                   st["temperature"], st["top_p"], st["max_new_tokens"], kind=kind, template=st["template"],
                   system=st["system_prompt"], stop=stop, template_kwargs=tkw)
    res.pop("samples")
    res = {"model": model_dir or path, "data": st["data"], "problems": len(examples), "settings": "run" if run is not None
           else "defaults", **{k: st[k] for k in ("samples", "temperature", "top_p", "max_new_tokens", "seed", "rollout",
                                                 "reward", "template", "stop", "chat_template_kwargs")},
           "thought_open": thought_open, **res}
    print(json.dumps(res, indent=1))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":  # the guard vLLM's in-process engine needs
    import sys

    sys.exit(cli(main))
