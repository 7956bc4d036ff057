"""Why level 4 of the built-in task stays flat in the default run's curves.png: the task, the tokenizer, the cold
start's SFT data and each model's copying of the operands, measured per level.

Prints, for the held-out problems of the default run's evaluation (tasks/load.py, split 'test', --problems, seed 0):
  * the data: problems per level, sums over 99, prompt length in tokens (and whether every character is one token,
    i.e. no merges), the training stream's problems per level and the cold start's SFT examples per level (all, and
    those with worked steps: tools/tiny.py sft's own draws);
and for each model (the cold start, a run's checkpoint, ...):
  * greedy accuracy per level (what curves.png plots), and greedy accuracy per level with the response's first
    characters forced to a worked solution ("18+"), which is what the policy writes once RL has taught it to write
    the steps;
  * the greedy responses' first error, per level: a bare answer, or the step that goes wrong (operand k miscopied,
    the accumulator miscopied, an arithmetic slip, a step too many or too few, the box);
  * teacher-forced copying: the correct worked solution given, is the model's top token at each step's operand the
    right digit? Per level and operand (op2 = the first single-digit operand), and what the wrong ones are (the
    operand before, the one after, a digit the prompt does not hold).

Run:  python bench/addition_levels.py                                     # the shipped cold start
      python bench/addition_levels.py models/tiny-qwen2 runs/default/checkpoint-40    # before and after RL
"""
from __future__ import annotations

import argparse
import os
import random
import re
import sys
from collections import Counter, defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

LEVEL_RANGE = range(1, 6)


def boxed(text: str) -> str | None:
    found = re.findall(r"\\boxed\{(\d+)\}", text)
    return found[-1] if found else None


def first_error(prompt: str, answer: str, completion: str) -> str:
    """The first thing a response gets wrong, reading its worked steps against the problem's."""
    ops = [int(x) for x in prompt.split("+")]
    steps = re.findall(r"(\d+)\+(\d+)=(\d+)", completion)
    if not steps:
        return "ok (bare answer)" if boxed(completion) == answer else "bare answer wrong"
    acc = ops[0]
    for i, (a, b, s) in enumerate(steps):
        if i + 1 >= len(ops):
            return "a step too many"
        if int(a) != acc:
            return f"step {i + 1}: accumulator miscopied"
        if int(b) != ops[i + 1]:
            return f"step {i + 1}: operand {i + 2} miscopied"
        if int(s) != int(a) + int(b):
            return f"step {i + 1}: arithmetic"
        acc = int(s)
    if len(steps) < len(ops) - 1:
        return "too few steps"
    return "ok" if boxed(completion) == answer else "box wrong"


def data_figures(examples) -> None:
    from tasks.load import load_dataset
    from tools.tiny import TinyRecipe, build_tokenizer
    from tasks.addition import builtin_task
    from tasks.templates import build_prompt

    recipe = TinyRecipe()
    tok = build_tokenizer(recipe.words())
    print("data (held-out problems of the run's evaluation)")
    print("level  problems  sum>99  prompt tokens (mean, max)  one token per character")
    for lvl in LEVEL_RANGE:
        xs = [e for e in examples if e.level == lvl]
        if not xs:
            continue
        lens = [len(tok(build_prompt(tok, e.prompt), add_special_tokens=False)["input_ids"]) for e in xs]
        same = sum(len(tok(e.prompt, add_special_tokens=False)["input_ids"]) == len(e.prompt) for e in xs)
        print(f"{lvl:>5}  {len(xs):>8}  {sum(int(e.answer) > 99 for e in xs):>6}  "
              f"{sum(lens) / len(lens):>13.1f} {max(lens):>4}          {same}/{len(xs)}")
    train = Counter(e.level for e in load_dataset("builtin", split="train", seed=0))
    print("training stream (train.py's 20,000 problems, seed 0), per level:",
          ", ".join(f"{k}: {train[k]}" for k in LEVEL_RANGE))
    rng = random.Random(recipe.seed)  # tools/tiny.py sft's draws, replayed
    pool = builtin_task(recipe.sft_steps * recipe.sft_batch, split="train", seed=recipe.seed + 1)
    rng.shuffle(pool)
    worked = Counter(e.level for e in pool if not rng.random() < recipe.sft_direct_frac)
    total = Counter(e.level for e in pool)
    print("cold start's SFT examples per level (worked / all):",
          ", ".join(f"{k}: {worked[k]}/{total[k]}" for k in LEVEL_RANGE))


def generate(model, tok, prompts: list[str], max_new_tokens: int = 64, batch: int = 100) -> list[str]:
    import torch

    out = []
    for s in range(0, len(prompts), batch):
        enc = tok(prompts[s:s + batch], return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
        with torch.no_grad():
            g = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=tok.eos_token_id,
                               pad_token_id=tok.pad_token_id)
        for ids in g[:, enc["input_ids"].shape[1]:].tolist():
            ids = ids[:ids.index(tok.eos_token_id)] if tok.eos_token_id in ids else ids
            out.append(tok.decode(ids, skip_special_tokens=True))
    return out


def teacher_forced(model, tok, examples):
    """{(level, k): [right?]} for operand k (2..) of each problem, and {(level, k): Counter(kind of wrong digit)}."""
    import torch
    from tasks.templates import build_prompt

    right, wrong = defaultdict(list), defaultdict(Counter)
    for e in examples:
        ops = [int(x) for x in e.prompt.split("+")]
        ids = tok(build_prompt(tok, e.prompt), add_special_tokens=False)["input_ids"]
        at, acc = [], ops[0]
        for i, x in enumerate(ops[1:]):
            ids = ids + tok(("" if i == 0 else " ") + f"{acc}+", add_special_tokens=False)["input_ids"]
            at.append((i + 2, len(ids) - 1, x))  # operand k is predicted from the '+' before it
            ids = ids + tok(f"{x}={acc + x}", add_special_tokens=False)["input_ids"]
            acc += x
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0]
        for k, pos, x in at:
            pred = tok.decode([int(logits[pos].argmax())])
            right[(e.level, k)].append(pred == str(x))
            if pred != str(x):
                held = [j + 1 for j, o in enumerate(ops) if j > 0 and str(o) == pred]
                kind = ("not in the prompt" if not held else f"op{k - 1}" if k - 1 in held else
                        f"op{k + 1}" if k + 1 in held else "another operand")
                wrong[(e.level, k)][kind] += 1
    return right, wrong


def model_figures(path: str, examples) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from tasks.templates import build_prompt

    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    prompts = [build_prompt(tok, e.prompt) for e in examples]
    greedy = generate(model, tok, prompts)
    heads = [e.prompt.split("+")[0] + "+" for e in examples]
    worked = [h + t for h, t in zip(heads, generate(model, tok, [p + h for p, h in zip(prompts, heads)]))]
    print(f"\n{path}")
    print("level  greedy acc        greedy acc, worked start   greedy responses' first error")
    for lvl in LEVEL_RANGE:
        idx = [i for i, e in enumerate(examples) if e.level == lvl]
        if not idx:
            continue
        ok = sum(boxed(greedy[i]) == examples[i].answer for i in idx)
        okw = sum(boxed(worked[i]) == examples[i].answer for i in idx)
        errs = Counter(first_error(examples[i].prompt, examples[i].answer, greedy[i]) for i in idx)
        print(f"{lvl:>5}  {ok:>3}/{len(idx):<3} ({ok / len(idx):.3f})  {okw:>3}/{len(idx):<3} ({okw / len(idx):.3f})"
              f"            " + ", ".join(f"{k} {v}" for k, v in errs.most_common()))
    right, wrong = teacher_forced(model, tok, examples)
    print("teacher-forced copying of each operand (right / problems; the wrong digits: which operand they are)")
    for lvl in LEVEL_RANGE:
        cells = []
        for k in range(2, lvl + 2):
            r = right.get((lvl, k))
            if r:
                w = wrong[(lvl, k)]
                cells.append(f"op{k} {sum(r)}/{len(r)}" + (f" [{', '.join(f'{a} {b}' for a, b in w.most_common())}]" if w else ""))
        if cells:
            print(f"  level {lvl}: " + "; ".join(cells))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="*", default=[os.path.join(ROOT, "models", "tiny-qwen2")],
                    help="model directories (default: the shipped cold start, models/tiny-qwen2)")
    ap.add_argument("--problems", type=int, default=400, help="held-out problems (the default run evaluates 400)")
    ap.add_argument("--split", default="test", choices=("test", "train"),
                    help="test: the run's held-out problems; train: as many training problems (the SFT's own kind)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    if args.problems < 1 or args.threads < 1:
        raise SystemExit("error: --problems and --threads must be >= 1")
    for m in args.models:
        if not os.path.isfile(os.path.join(m, "config.json")):
            raise SystemExit(f"error: {m}: not a model directory (no config.json)")
    import torch
    from tasks.load import load_dataset

    torch.set_num_threads(args.threads)
    examples = load_dataset("builtin", split=args.split, n=args.problems, seed=0)
    data_figures(examples)
    for m in args.models:
        model_figures(m, examples)


if __name__ == "__main__":
    main()
