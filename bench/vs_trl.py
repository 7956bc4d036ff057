"""This project's train.py against TRL's GRPOTrainer on the same machine, same model, same prompts, same settings.

    pip install -e ".[bench]"                 # TRL (an optional extra; not needed for anything else)
    python bench/vs_trl.py                    # 3 repetitions x 8 steps per side, run A B A B ...
    python bench/vs_trl.py --reps 1 --steps 4 --engine hf --train-args "--micro-batch-tokens 0"   # as before the speed-ups
    python bench/vs_trl.py --model smollm2-135m-instruct --prompts 8 --max-new-tokens 128 --lr 1e-5 --threads 2 \
        --dtype bf16-mixed --attn-implementation eager --trl-micro 8 \
        --train-args "--rollout-dtype bfloat16 --draw inverse-cdf"   # SmolLM2-135M on a CPU (docs/speed.md)

Both sides: the cold-start tiny model (tools/tiny.py), B = 32 built-in-task prompts x G = 8, at most 64 new tokens,
temperature 1, top-p 1, top-k off, no repetition penalty, AdamW at a constant lr 1e-4 (no warm-up), token-mean loss
(TRL's `loss_type="dapo"`), one optimizer update per rollout (mu = 1, no reference model, beta = 0), grad clip 1.0,
1 torch thread (--threads), the same reward function (reward.MathReward, 1/0), and the same prompt strings in the same order
(the project's prompt sampler is replayed to build TRL's dataset, which TRL then reads unshuffled). Each side runs
in its own process; a child reports the settings it actually ran with and the parent asserts they are identical.
On a machine with a CUDA GPU both sides run on it with bf16 mixed precision (train.py's --dtype auto; TRL's
bf16=True: fp32 weights and AdamW, the forward under bf16 autocast); --dtype bf16-mixed asks for it on a CPU too; the
settings check includes device, precision, threads and attention (--attn-implementation, both sides' policy).
--trl-micro N: TRL's per-device batch of N completions, gradient accumulation over B x G / N of them, one optimizer
update per step still (the project cuts its micro-batches by --micro-batch-tokens).
Per step: the median over steps 2..N of the wall time of a step (generation, reward, update; TRL: from one
`on_step_end` to the next, so its logging is included; the project: `perf/step_time_s`), and response tokens/s.
Prints figures; asserts only that the settings match.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import types

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the project is one folder up
sys.path.insert(0, ROOT)


def prompts_in_draw_order(tok, n_prompts: int, steps: int, seed: int):
    """The (prompt string, answer) pairs the project's trainer draws in its first `steps` steps, in order."""
    from tasks.load import load_dataset
    from tasks.templates import build_prompt
    from trainer import samplers

    train_set = load_dataset("builtin", split="train", seed=seed)
    sampler = samplers.EpochOrder(len(train_set), seed)
    idx = [i for step in range(steps) for i in sampler.draw(step, n_prompts)]
    return [(build_prompt(tok, train_set[i].prompt), train_set[i].answer) for i in idx]


def digest(pairs) -> str:
    return hashlib.sha256(json.dumps(pairs).encode()).hexdigest()[:16]


# ---------------------------------------------------------------------------------------------------------------
def run_project(a, model_path: str) -> dict:
    import torch

    from accelerate import PartialState

    import train
    from trainer import distributed

    out = tempfile.mkdtemp(prefix="vs-trl-project-")
    argv = ["--model", model_path, "--output-dir", out, "--max-steps", str(a.steps), "--seed", str(a.seed),
            "--batch-size", str(a.prompts * a.group), "--group-size", str(a.group), "--max-new-tokens", str(a.max_new_tokens),
            "--lr", str(a.lr), "--warmup-steps", "0", "--loss-agg", "token-mean", "--threads", str(a.threads),
            "--eval-every", "0", "--eval-problems", "8", "--rollout", a.engine, "--dtype", a.dtype,
            *(["--attn-implementation", a.attn_implementation] if a.attn_implementation else []), *a.train_args.split()]
    hist = train.main(argv)
    cfg = json.load(open(os.path.join(out, "config.json")))
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_path)
    settings = {
        "model": model_path, "prompts": digest(prompts_in_draw_order(tok, a.prompts, a.steps, cfg["seed"])),
        "B": cfg["batch_size"] // cfg["group_size"], "G": cfg["group_size"], "max_new_tokens": cfg["max_new_tokens"],
        "lr_per_step": [r["perf/lr"] for r in hist], "loss": {"token-mean": "token-mean"}[cfg["loss_agg"]],
        "updates_per_step": [r["policy/updates"] for r in hist], "beta": cfg["kl_coef"], "clip": [cfg["clip_low"], cfg["clip_high"]],
        "grad_clip": cfg["grad_clip"], "threads": torch.get_num_threads(), "attention": cfg["attn_implementation"],
        "device": PartialState().device.type, "precision": distributed.precision(types.SimpleNamespace(**cfg)),  # as train.py's Accelerator
        "sampling": {"temperature": cfg["temperature"], "top_p": cfg["top_p"], "top_k": 0, "repetition_penalty": 1.0},
    }
    return {"settings": settings, "step_s": [r["perf/step_time_s"] for r in hist],
            "tokens": [r["rollout/response_length"] * cfg["batch_size"] for r in hist]}


def run_trl(a, model_path: str) -> dict:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from reward import MathReward

    torch.set_num_threads(a.threads)
    tok = AutoTokenizer.from_pretrained(model_path)
    pairs = prompts_in_draw_order(tok, a.prompts, a.steps, a.seed)
    ds = Dataset.from_list([{"prompt": p, "answer": ans} for p, ans in pairs])
    scorer = MathReward(1.0, 0.0, workers=2)  # the project's default reward, its worker pool included

    def math_reward(completions, answer, **kw):
        return scorer(completions, answer)[0]

    class Clock(TrainerCallback):
        def __init__(self):
            self.ends, self.begin, self.lr, self.tokens = [], None, [], []

        def on_step_begin(self, args, state, control, **kw):
            if self.begin is None:
                self.begin = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            self.ends.append(time.perf_counter())
            self.lr.append(kw["lr_scheduler"].get_last_lr()[0])

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "completions/mean_length" in logs:
                self.tokens.append(logs["completions/mean_length"] * a.prompts * a.group)

    out = tempfile.mkdtemp(prefix="vs-trl-trl-")
    gpu = torch.cuda.is_available()  # as train.py: the GPU when there is one, with bf16-mixed (its --dtype auto)
    micro = a.trl_micro or a.prompts * a.group
    args = GRPOConfig(
        output_dir=out, max_steps=a.steps, seed=a.seed, use_cpu=not gpu, report_to="none", save_strategy="no",
        logging_steps=1, disable_tqdm=True, log_completions=False, per_device_train_batch_size=micro,
        gradient_accumulation_steps=a.prompts * a.group // micro, steps_per_generation=a.prompts * a.group // micro,
        num_generations=a.group, num_iterations=1, max_completion_length=a.max_new_tokens, shuffle_dataset=False,
        temperature=1.0, top_p=1.0, top_k=0, repetition_penalty=1.0,
        learning_rate=a.lr, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0,
        adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8,
        loss_type="dapo", beta=0.0, epsilon=0.2, scale_rewards="group", bf16=gpu or a.dtype == "bf16-mixed",
        dataloader_num_workers=0,
    )
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32, **(
        {"attn_implementation": a.attn_implementation} if a.attn_implementation else {}))
    clock = Clock()
    trainer = GRPOTrainer(model=model, reward_funcs=math_reward, args=args, train_dataset=ds, processing_class=tok,
                          callbacks=[clock])
    trainer.train()
    scorer.close()
    gc = trainer.generation_config
    settings = {
        "model": model_path, "prompts": digest(pairs),
        "B": args.per_device_train_batch_size * args.gradient_accumulation_steps // args.num_generations,
        "G": args.num_generations, "max_new_tokens": gc.max_new_tokens, "lr_per_step": clock.lr,
        "loss": {"dapo": "token-mean"}[args.loss_type], "updates_per_step": [1] * len(clock.lr), "beta": args.beta,
        "clip": [trainer.epsilon_low, trainer.epsilon_high], "grad_clip": args.max_grad_norm, "threads": torch.get_num_threads(),
        "attention": a.attn_implementation,
        "device": trainer.accelerator.device.type, "precision": "bf16-mixed" if args.bf16 else "float32",
        "sampling": {"temperature": gc.temperature, "top_p": gc.top_p, "top_k": gc.top_k or 0,
                     "repetition_penalty": gc.repetition_penalty if gc.repetition_penalty is not None else 1.0},
    }
    starts = [clock.begin] + clock.ends[:-1]
    return {"settings": settings, "step_s": [e - s for s, e in zip(starts, clock.ends)], "tokens": clock.tokens}


# ---------------------------------------------------------------------------------------------------------------
def model_dir(name: str, verbose: bool = True) -> str:
    """--model: a directory, a name the project resolves (smollm2-135m-instruct: tools/smollm2.py), or the tiny model."""
    from tools import smollm2, tiny

    return smollm2.named_model(name) or name or tiny.get_tiny_model(verbose=verbose)


def child(a) -> None:
    model_path = model_dir(a.model, verbose=False)
    res = (run_trl if a.side == "trl" else run_project)(a, model_path)
    with open(a.result, "w") as f:
        json.dump(res, f)


def median_from_2(xs):
    return statistics.median(xs[1:] if len(xs) > 1 else xs)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--prompts", type=int, default=32, help="B, prompts per step")
    ap.add_argument("--group", type=int, default=8, help="G, completions per prompt")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--engine", default="fast", help="the project's rollout engine (train.py --rollout)")
    ap.add_argument("--train-args", default="", help="extra train.py flags for the project side, e.g. '--micro-batch-tokens 0'")
    ap.add_argument("--model", default="", help="model directory or smollm2-135m-instruct (default: the tiny model)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads, both sides")
    ap.add_argument("--dtype", default="auto", choices=("auto", "bf16-mixed"),
                    help="auto: bf16-mixed on a GPU, float32 on a CPU (train.py's); bf16-mixed: both sides, anywhere")
    ap.add_argument("--attn-implementation", default="", help="both sides' policy attention ('' = transformers' choice)")
    ap.add_argument("--trl-micro", type=int, default=0, help="TRL's completions per forward/backward (0 = all B x G)")
    ap.add_argument("--side", choices=["trl", "project"], help=argparse.SUPPRESS)  # child mode
    ap.add_argument("--result", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.side:
        return child(a)
    try:
        import trl
    except ImportError:
        raise SystemExit('error: TRL is not installed; pip install -e ".[bench]"')
    import torch
    import transformers

    model_path = model_dir(a.model)
    runs = {"project": [], "trl": []}
    fwd = ["--steps", str(a.steps), "--prompts", str(a.prompts), "--group", str(a.group), "--max-new-tokens",
           str(a.max_new_tokens), "--lr", str(a.lr), "--seed", str(a.seed), "--engine", a.engine, "--model", model_path,
           "--threads", str(a.threads), "--dtype", a.dtype, f"--attn-implementation={a.attn_implementation}",
           "--trl-micro", str(a.trl_micro), f"--train-args={a.train_args}"]
    for rep in range(a.reps):
        for side in ("project", "trl"):  # interleaved: A B A B ...
            with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
                path = f.name
            load = os.getloadavg()[0]
            r = subprocess.run([sys.executable, os.path.abspath(__file__), "--side", side, "--result", path, *fwd],
                               cwd=ROOT, capture_output=True, text=True)
            if r.returncode != 0:
                sys.stderr.write(r.stdout[-3000:] + r.stderr[-6000:])
                raise SystemExit(f"error: the {side} run failed (exit code {r.returncode})")
            res = json.load(open(path))
            os.unlink(path)
            res["load"] = load
            runs[side].append(res)
            s = median_from_2(res["step_s"])
            print(f"rep {rep + 1} {side:8s} median s/step {s:6.3f}  steps/s {1 / s:6.3f}  "
                  f"tokens/s {median_from_2([t / x for t, x in zip(res['tokens'], res['step_s'])]):7.0f}  (load avg {load:.2f})", flush=True)
    # identical settings on both sides (the per-step lr and update counts included)
    for p, t in zip(runs["project"], runs["trl"]):
        ps, ts = p["settings"], t["settings"]
        skip = {"threads"} if ps["device"] == "cuda" else set()  # on a GPU the CPU thread count sets no kernel's speed
        diff = {k: (ps[k], ts.get(k)) for k in ps if k not in skip and ps[k] != ts.get(k)}
        assert not diff, f"settings differ between the two sides: {diff}"
    s = runs["project"][0]["settings"]
    print(f"\nsettings (identical on both sides): model {s['model']}, B {s['B']} x G {s['G']}, {s['max_new_tokens']} new tokens, "
          f"lr {s['lr_per_step'][0]} constant, loss {s['loss']}, beta {s['beta']}, clip {s['clip']}, {s['threads']} thread(s), {s['device']} {s['precision']}, "
          f"attention {s['attention'] or 'default'}, "
          f"sampling {s['sampling']}, prompts sha {s['prompts']}")
    print(f"versions: torch {torch.__version__}, transformers {transformers.__version__}, trl {trl.__version__}; "
          f"project engine {a.engine!r}, extra train.py flags {a.train_args!r}; cpu count {os.cpu_count()}")
    print(f"\n{'rep':>3} {'project s/step':>15} {'TRL s/step':>11} {'project tok/s':>14} {'TRL tok/s':>10} {'speed ratio':>12}")
    ratios = []
    for i, (p, t) in enumerate(zip(runs["project"], runs["trl"])):
        ps, ts = median_from_2(p["step_s"]), median_from_2(t["step_s"])
        pt = median_from_2([x / y for x, y in zip(p["tokens"], p["step_s"])])
        tt = median_from_2([x / y for x, y in zip(t["tokens"], t["step_s"])])
        ratios.append(ts / ps)
        print(f"{i + 1:>3} {ps:15.3f} {ts:11.3f} {pt:14.0f} {tt:10.0f} {ts / ps:11.2f}x")
    print(f"median speed ratio (project steps/s / TRL steps/s): {statistics.median(ratios):.2f}x")


if __name__ == "__main__":
    sys.exit(main())
