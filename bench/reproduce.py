"""Each seed paper's claim about training dynamics, reproduced at toy scale on the built-in tasks (CPU, minutes); and
the claims of the two losses after the seeds (GSPO, CISPO: gspo.py, cispo.py).

    python bench/reproduce.py dapo       # DAPO Table 1: the cumulative ablation, GRPO -> DAPO
    python bench/reproduce.py entropy    # DAPO Sec. 3.1 / Skywork Sec. 3.7: clip-higher and mu > 1 vs entropy
    python bench/reproduce.py skywork    # Skywork-OR1 Sec. 3.2: adaptive entropy vs fixed coefficients
    python bench/reproduce.py ringlite   # Ring-lite Fig. 7: C3PO's token budget vs GRPO
    python bench/reproduce.py ringlite-stages   # Ring-lite: two-stage math -> code vs a joint schedule
    python bench/reproduce.py mimo       # MiMo: seamless vs naive dynamic sampling, easy pool vs dropping solved prompts
    python bench/reproduce.py mimo-code  # MiMo: strict vs soft test-difficulty reward on the built-in code task
    python bench/reproduce.py compass    # Compass-Thinker: staged easy -> hard curriculum vs a uniform mix
    python bench/reproduce.py async      # one-step off-policy rollout (--rollout-lag 1) vs the synchronous loop
    python bench/reproduce.py offpolicy-losses   # DAPO's token clip vs GSPO's sequence clip vs CISPO's weight cap, mu 16
    python bench/reproduce.py all
    python bench/reproduce.py PAPER --task countdown   # the same on Countdown (every paper but ringlite-stages, mimo-code)

Each command trains every variant of its experiments with `train.py` (the project's own recipes and flags only) for
each seed (`--seeds`, default 0,1,2), `--workers` runs at a time (default 2: one per core, one torch thread each),
then prints its table and writes docs/reproduce_<paper>.md (settings, the exact command, tables with mean +- sd over
seeds and every seed's value, the pre-declared check of the claim and what it measured) and docs/reproduce_<paper>.png
(mean over seeds, the band spanning min..max). Runs live in runs/reproduce/<paper>/<variant>/seed<N>/; a finished run
with the same arguments is reused, so an interrupted command continues where it stopped. `--smoke`: 2 steps, one
seed, nothing written to docs/ (the test suite's check that every experiment still runs).

What "reproduces" means here: each experiment declares its check before it is run (the `check` functions below: which
metric, which comparison, how many seeds must agree); the verdict is "reproduces" when the paper's direction holds in
the mean (by more than the spread over seeds) and in every seed, "partly" when it holds in the mean only (or for some
of the claim's parts), "does not" otherwise. A toy model (1M parameters, 10-50-token responses, 25-40 steps) is not a 7B model at 16K tokens: where a
claim does not reproduce, the report says which scale the mechanism needs.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the project is one folder up

# Every run: 16 prompts x 8 = 128 responses per step (half the default batch: 3 seeds x every variant must fit the
# minutes), 200 held-out problems, one torch thread, math-verify in process (the workers are the parallelism).
COMMON = ["--batch-size", "128", "--mini-batch-size", "128", "--group-size", "8", "--eval-problems", "200", "--reward-workers", "0", "--threads", "1"]
# --task countdown: the same experiments on Countdown (level 1, the shipped cold start models/tiny-qwen2-countdown and
# its defaults: config.py COUNTDOWN), where a search's length and its choices give the techniques something to act on.
# The papers whose experiments have a Countdown form (compass on levels 1-2: its curriculum needs a harder level):
COUNTDOWN = ["--train-data", "builtin-countdown"]
COUNTDOWN_PAPERS = ("dapo", "entropy", "skywork", "ringlite", "mimo", "compass", "async", "offpolicy-losses")
# and the two whose claim is about something a Countdown answer does not have (the error --task countdown gives):
NO_COUNTDOWN = {"ringlite-stages": "its claim is about two domains trained in turn (math, then code), and the Countdown "
                                   "model knows one",
                "mimo-code": "its claim is about partial credit over a program's test cases, and a Countdown answer is "
                             "one check (right or wrong)"}
ON_COUNTDOWN = "Countdown level 1, the shipped cold start, its defaults (128 tokens, lr 3e-4)"  # the reports' notes
# --task smollm2: a real pretrained LLM (docs/smollm2.md): SmolLM2-135M-Instruct on reasoning-gym's chain_sum (two
# two-digit terms, "The final answer is X." asked for), the README run's settings (8 prompts x 8, bf16 autocast, lr
# 1e-5) at 32 new tokens, where 27 % of its first responses are truncated (bench/smollm2_base.py at 32 tokens: in-format
# accuracy 0.031, the answer anywhere 0.117, 12 % of groups mixed), so that the length limit acts as in the papers;
# the step made cheap (eager attention, the fast engine's bf16 copy and inverse-CDF draw: docs/smollm2.md); 64 held-out
# problems, greedy every 10 steps. --task smollm2-easy: two one-digit terms (the README run's task; 24 held-out
# problems, of the 26 its held-out side has), which the model learns in ~20 steps (docs/reproduce_dapo_smollm2-easy_x10.md).
# --task smollm2-short: --task smollm2 at 16 new tokens, where 45 % of the first responses are cut (bench/smollm2_base.py:
# 27 % at 32, 37 % at 24; in-format accuracy 0.031 and 12 % of groups mixed at each), about Countdown's 40-56 %; a
# response in the format is 8-9 tokens ("The final answer is 57."), one that works the sum first ~19.
# --task smollm2-worked: --task smollm2 with the working asked for and the last number read (tasks/rg.py format=worked),
# where 8 of the base model's 41 right answers are longer than 32 tokens (bench/smollm2_base.py --cut; final-answer: 0).
# Runs are kept as data in docs/smollm2_runs/ (checkpoints aside), so an unfinished reproduction resumes where it stopped.
SMOLLM2_SPEC = "rg:chain_sum?min_terms=2&max_terms=2&max_digits={digits}&format={fmt}"
SMOLLM2 = ["--model", "smollm2-135m-instruct", "--batch-size", "64", "--group-size", "8", "--max-new-tokens", "32",
           "--dtype", "bf16-mixed", "--lr", "1e-5", "--attn-implementation", "eager", "--rollout", "fast",
           "--rollout-dtype", "bfloat16", "--draw", "inverse-cdf", "--eval-every", "10", "--eval-samples", "4",
           "--reward-workers", "0", "--save-every", "10", "--keep-checkpoints", "1"]
SMOLLM2_PAPERS = ("dapo", "entropy", "skywork", "ringlite", "mimo", "compass", "async", "offpolicy-losses")
NO_SMOLLM2 = {"ringlite-stages": "its claim is about the built-in math and code tasks trained in turn",
              "mimo-code": "its claim is about the built-in code task's test cases"}
# Difficulty levels (compass, MiMo's easy pool): reasoning-gym's own chain_sum curriculum, its global levels 0 and 1 as
# levels 1 and 2 (two one-digit terms; two or three terms of one or two digits). Before RL at 32 tokens
# (bench/smollm2_base.py, 16 problems x 8, one level a spec): in-format 0.016 / 0.008, mixed groups 12 % / 6 %; level
# 3 (up to four three-digit terms) 0.000 and no mixed group, so it is left out, as Countdown's level 3 is. 48 held-out
# problems, 24 a level (level 1 has 26).
SMOLLM2_LEVELS = "rg:chain_sum?levels=0,1&format=final-answer"
ON_LEVELS = ("SmolLM2-135M-Instruct on reasoning-gym's chain_sum levels 1-2 (its curriculum's levels 0 and 1: two "
             "one-digit terms; two or three terms of one or two digits) at 32 new tokens")
SMOLLM2_RUNS = os.path.join(ROOT, "docs", "smollm2_runs", "reproduce")
TASKS = ("math", "countdown", "smollm2", "smollm2-easy", "smollm2-short", "smollm2-worked")
ON_SMOLLM2 = {"smollm2": "SmolLM2-135M-Instruct, chain_sum (two two-digit terms) at 32 new tokens",
              "smollm2-easy": "SmolLM2-135M-Instruct, chain_sum (two one-digit terms) at 32 new tokens",
              "smollm2-short": "SmolLM2-135M-Instruct, chain_sum (two two-digit terms) at 16 new tokens",
              "smollm2-worked": "SmolLM2-135M-Instruct, chain_sum (two two-digit terms), the working asked for and the "
                                "last number read, at 32 new tokens"}
SMOLLM2_TOKENS = {"smollm2-short": "16"}  # --max-new-tokens where it is not SMOLLM2's 32
SMOLLM2_FORMAT = {"smollm2-worked": "worked"}  # tasks/rg.py's answer format where it is not final-answer
SHORT_PAPERS = ("dapo",)  # the papers of the tasks made for DAPO's overlong row alone (NO_SHORT)
NO_SHORT = {"smollm2-short": ("at 16 tokens", "the 16-token task is for DAPO's overlong row; the other claims' forms are "
                                              "at 32 (--task smollm2)"),
            "smollm2-worked": ("with the working asked for", "the task is for DAPO's overlong row; the other claims' "
                                                             "forms read 'The final answer is X.' (--task smollm2)")}


def smollm2_levels() -> list:
    """The real model's settings on SMOLLM2_LEVELS (two difficulty levels, 48 held-out problems)."""
    return ["--train-data", SMOLLM2_LEVELS, *SMOLLM2, "--eval-problems", "48"]


def common(task: str) -> list:
    """COMMON, and on Countdown its task (whose config.py defaults then apply); SMOLLM2 on the real model."""
    if task.startswith("smollm2"):
        easy, flags = task == "smollm2-easy", list(SMOLLM2)
        flags[flags.index("--max-new-tokens") + 1] = SMOLLM2_TOKENS.get(task, "32")
        spec = SMOLLM2_SPEC.format(digits=1 if easy else 2, fmt=SMOLLM2_FORMAT.get(task, "final-answer"))
        return ["--train-data", spec, *flags, "--eval-problems", "24" if easy else "64"]
    return COMMON + (COUNTDOWN if task == "countdown" else [])


@dataclass
class Experiment:
    name: str
    claim: str  # what the paper says, and where
    base: list  # train.py flags of every variant
    variants: dict  # variant -> its extra flags
    check: object  # (Experiment, runs) -> (verdict, [lines]): the claim's test, declared before running
    table: list  # [(column title, function(run) -> float)]: per-variant mean +- sd over seeds
    plots: list  # [(title, metric key or function(run) -> (steps, values))]
    note: str = ""  # what the scale of this reproduction changes
    shared: dict = field(default_factory=dict)  # variant -> the experiment whose runs of it (the same flags) it reads
    runs: dict = field(default_factory=dict)  # variant -> [Run per seed], filled by `run`
    early: bool = False  # some runs ended before their last step: checks compare pairs at pair_step


@dataclass
class Run:
    dir: str
    metrics: list  # metrics.jsonl rows
    evals: list  # evals.jsonl rows
    summary: dict


# ------------------------------------------------------------------------------------------------
# Small statistics
def mean_sd(xs) -> str:
    xs = [x for x in xs if x is not None and not math.isnan(x)]
    if not xs:
        return "–"
    sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
    return f"{statistics.mean(xs):.3g} ± {sd:.2g}"


def last(key, n=5):
    """Mean of a metric over the last n steps of a run."""
    def f(r: Run):
        vals = [m[key] for m in r.metrics[-n:] if key in m]
        return sum(vals) / len(vals) if vals else float("nan")
    return f


def over_run(key):
    """Mean of a metric over every step of a run that logged it."""
    def f(r: Run):
        vals = [m[key] for m in r.metrics if key in m]
        return statistics.mean(vals) if vals else float("nan")
    return f


def cv(key):
    """Coefficient of variation over the steps of a run (sd / mean)."""
    def f(r: Run):
        vals = [m[key] for m in r.metrics if key in m]
        return statistics.stdev(vals) / statistics.mean(vals) if len(vals) > 1 and statistics.mean(vals) else float("nan")
    return f


def final(key):
    return lambda r: r.summary["after"].get(key, float("nan"))


def first_step_at(key, threshold):
    """First evaluated step whose `key` reaches `threshold` (nan if never)."""
    def f(r: Run):
        return next((e["step"] for e in r.evals if e.get(key, -1) >= threshold), float("nan"))
    return f


def per_seed(exp, variant, fn):
    return [fn(r) for r in exp.runs[variant]]


def pair_step(exp, a, b):
    """Where some runs ended early (a time limit, an error): the last evaluated step every run of `a` and `b` reached,
    at which the two are compared; None when every run finished."""
    if not exp.early:
        return None
    return min(last_eval_step(r.dir) for r in exp.runs[a] + exp.runs[b])


def at(exp, a, b) -> str:
    """' at step K' where `a` and `b` are compared at step K (pair_step), else ''."""
    k = pair_step(exp, a, b)
    return "" if k is None else f" at step {k}"


def compare(exp, a, b, fn, higher=True):
    """Does variant `a` beat `b` on fn (higher or lower)? -> (in the mean by more than the seeds' spread, seeds where
    it does, seeds, mean of a, mean of b). A mean difference within the larger of the two standard deviations over
    seeds counts as no difference; so does any difference when a seed's value is nan (first_step_at: never). Runs
    that ended early: both variants' runs read up to pair_step."""
    k = pair_step(exp, a, b)
    if k is None:
        xa, xb = per_seed(exp, a, fn), per_seed(exp, b, fn)
    else:
        xa, xb = ([fn(load_run(r.dir, k)) for r in exp.runs[v]] for v in (a, b))
    wins = sum((x > y) if higher else (x < y) for x, y in zip(xa, xb))
    ma, mb = statistics.mean(xa), statistics.mean(xb)
    sd = lambda xs: statistics.stdev(xs) if all(x == x for x in xs) else float("nan")  # noqa: E731 (nan: a seed never got there)
    spread = max(sd(xa), sd(xb)) if len(xa) > 1 else 0.0
    return ((ma - mb > spread) if higher else (mb - ma > spread)), wins, len(xa), ma, mb


def verdict_of(parts) -> str:
    """parts: compare() results -> reproduces (every part, in the mean and every seed) / partly / does not."""
    if all(m and w == n for m, w, n, _, _ in parts):
        return "reproduces"
    if any(m for m, *_ in parts):
        return "partly"
    return "does not"


def line(what, res, fmt="{:.3g}"):
    m, w, n, a, b = res
    return (f"{what}: {fmt.format(a)} vs {fmt.format(b)} (beyond the seeds' spread: {'yes' if m else 'no'}; "
            f"the claimed way in {w}/{n} seeds)")


# ------------------------------------------------------------------------------------------------
# The experiments, one list per paper
def held_out(key="eval/accuracy", n=2):
    """Mean of a held-out metric over a run's last n evaluations after step 0 (the real model's runs: greedy every 10
    steps, so a run stopped at a time limit has them too)."""
    def f(r: Run):
        vals = [e[key] for e in r.evals if e["step"] > 0 and key in e][-n:]
        return statistics.mean(vals) if vals else float("nan")
    return f


TABLE_1_PLOTS = [("held-out greedy accuracy", "eval:eval/accuracy"), ("train accuracy", "rollout/accuracy"),
                 ("response length", "rollout/response_length"), ("truncated share", "rollout/truncated_frac"),
                 ("token entropy", "policy/entropy")]  # DAPO Table 1's plots, every task's form


def dapo_smollm2(task):
    """DAPO Table 1 on SmolLM2-135M-Instruct. The rows: GRPO, then clip-higher, the soft overlong punishment, the
    token-level loss and dynamic sampling added in turn; overlong filtering is not a row of its own (verl's DAPO FAQ:
    the best run went without it, as it overlaps the overlong reward shaping). On --task smollm2 a second form: the
    clip-higher row at DAPO's mu = 16."""
    steps = ["GRPO", "+ clip-higher", "+ soft overlong punishment", "+ token-level loss", "+ dynamic sampling (= DAPO)"]
    adds = [[], ["--clip-high", "0.28"], ["--overlong-buffer", "8"], ["--loss-agg", "token-mean"],
            ["--dynamic-sampling", "--gen-batch-factor", "3"]]
    variants, acc = {}, []
    for name, add in zip(steps, adds):
        acc = acc + add
        variants[name] = list(acc)
    acc_ = held_out()

    def check(exp, runs):
        top = compare(exp, steps[-1], steps[0], acc_)
        hi = compare(exp, steps[1], steps[0], acc_)
        ol = compare(exp, steps[2], steps[1], acc_)
        ent = compare(exp, steps[1], steps[0], over_run("policy/entropy"))
        trunc = compare(exp, steps[2], steps[1], over_run("rollout/truncated_frac"), higher=False)
        return verdict_of([top, hi, ol]), [
            line(f"held-out greedy accuracy (last two evaluations), DAPO vs GRPO{at(exp, steps[-1], steps[0])}", top),
            line(f"the clip-higher row: + clip-higher vs GRPO, same accuracy{at(exp, steps[1], steps[0])}", hi),
            line(f"the overlong row: + soft overlong punishment vs + clip-higher, same accuracy"
                 f"{at(exp, steps[2], steps[1])}", ol),
            line(f"mechanism: token entropy over the run, + clip-higher vs GRPO (higher = kept up)"
                 f"{at(exp, steps[1], steps[0])}", ent),
            line(f"mechanism: truncated share over the run, + soft overlong vs + clip-higher (lower = fewer cut off)"
                 f"{at(exp, steps[2], steps[1])}", trunc)]

    if task == "smollm2-short":
        return [dapo_short(steps[:3], acc_)]
    if task == "smollm2-worked":
        return [dapo_worked(steps[1:3], acc_)]
    mu16 = ["GRPO, mu 16", "+ clip-higher, mu 16"]

    def check_mu16(exp, runs):
        row = compare(exp, mu16[1], mu16[0], acc_)
        ent = compare(exp, mu16[1], mu16[0], last("policy/entropy", 5))
        hi = compare(exp, mu16[1], mu16[0], over_run("policy/clip_frac_high"), higher=False)
        return verdict_of([row, ent]), [
            line(f"the clip-higher row: held-out greedy accuracy (last two evaluations), + clip-higher vs GRPO"
                 f"{at(exp, *mu16[::-1])}", row),
            line(f"entropy (last 5 steps), + clip-higher vs GRPO (higher = kept up){at(exp, *mu16[::-1])}", ent),
            line(f"mechanism: share of tokens clipped on the high side, + clip-higher vs GRPO (lower = the wider clip "
                 f"lets more rise){at(exp, *mu16[::-1])}", hi)]

    return [Experiment(
        "DAPO Table 1: the cumulative ablation",
        "DAPO Table 1: each technique added to naive GRPO raises AIME avg@32 (30 -> 36 -> 38 -> 41 -> 42 -> 50).",
        common(task) + ["--wrong-reward", "-1", "--mini-batch-size", "16", "--max-steps", "30"], variants, check,
        [("held-out acc (last 2 evals)", acc_), ("greedy acc after", final("eval/accuracy")),
         ("avg@4 after", final("eval/avg@4")), ("truncated", over_run("rollout/truncated_frac")),
         ("clip hi", over_run("policy/clip_frac_high")), ("entropy", over_run("policy/entropy")),
         ("length", over_run("rollout/response_length")), ("zero-var groups", over_run("rollout/frac_zero_std"))],
        TABLE_1_PLOTS,
        note=f"{ON_SMOLLM2[task]} (a quarter of the first responses reach it), 8 prompts x 8, lr 1e-5, mu = 4 "
             "(mini-batches of 16 of the 64 responses; DAPO's is 16), reward +-1 in every row (DAPO's), the soft "
             "punishment over the last 8 tokens (DAPO's 4K of 20K is a fifth; the dapo recipe's 16 of 64 a quarter), "
             "the dapo recipe's generation factor 3. The check reads the held-out greedy accuracy of the last two "
             "evaluations rather than avg@k at the end, so that runs that ended early (a time limit, an error) are "
             "compared at the last evaluation both variants reached."),
        Experiment(  # the Table 1 form's clip-higher row clipped 0.4-0.5 % of tokens at mu 4: too near on-policy to act
            "DAPO Table 1: clip-higher at mu 16",
            "DAPO Table 1 and Sec. 3.1: clip-higher (eps_high 0.28) added to GRPO raises AIME avg@32 (the row's 36 -> "
            "38), by keeping the entropy from collapsing; DAPO makes 16 updates per rollout.",
            common(task) + ["--wrong-reward", "-1", "--mini-batch-size", "4", "--max-steps", "30"],
            {"GRPO, mu 16": [], "+ clip-higher, mu 16": ["--clip-high", "0.28"]}, check_mu16,
            [("held-out acc (last 2 evals)", acc_), ("greedy acc after", final("eval/accuracy")),
             ("entropy, last 5", last("policy/entropy", 5)), ("clip hi", over_run("policy/clip_frac_high")),
             ("clip lo", over_run("policy/clip_frac_low")), ("truncated", over_run("rollout/truncated_frac")),
             ("length", over_run("rollout/response_length"))],
            [("held-out greedy accuracy", "eval:eval/accuracy"), ("train accuracy", "rollout/accuracy"),
             ("token entropy", "policy/entropy"), ("clipped high", "policy/clip_frac_high")],
            note=f"{ON_SMOLLM2[task]}, 8 prompts x 8, lr 1e-5, reward +-1, the sample-level loss of Table 1's first "
                 "rows. mu = 16 as DAPO's verl script (mini-batches of 512 of 8,192 responses), here 4 of 64, half a "
                 "group an update: the clip acts only as far as the ratio leaves 1, and in the Table 1 form above "
                 "(mu 4) 0.4-0.5 % of the tokens were clipped high. The verdict needs both the row's accuracy and "
                 "Sec. 3.1's entropy; this form was declared after that form's runs and before its own.")
    ][:2 if task == "smollm2" else 1]  # the easy task (--task smollm2-easy) ran on an H200 before the mu-16 form


def dapo_short(rows, acc_):
    """--task smollm2-short: Table 1's clip-higher and overlong rows at half the length limit. Declared after the 32-token
    form's three seeds, before its own runs: there every row stopped being cut by step ~8 in seeds 0 and 1, and the one
    run that kept writing to the limit (clip-higher, seed 2) is where the shaping paid (0.422 vs 0.273)."""
    def check(exp, runs):
        hi = compare(exp, rows[1], rows[0], acc_)
        ol = compare(exp, rows[2], rows[1], acc_)
        trunc = compare(exp, rows[2], rows[1], over_run("rollout/truncated_frac"), higher=False)
        flat = compare(exp, rows[2], rows[1], over_run("rollout/frac_zero_std"), higher=False)
        ent = compare(exp, rows[1], rows[0], over_run("policy/entropy"))
        return verdict_of([hi, ol]), [
            line(f"the clip-higher row: held-out greedy accuracy (last two evaluations), + clip-higher vs GRPO"
                 f"{at(exp, rows[1], rows[0])}", hi),
            line(f"the overlong row: held-out greedy accuracy (last two evaluations), + soft overlong punishment vs "
                 f"+ clip-higher{at(exp, rows[2], rows[1])}", ol),
            line(f"mechanism: truncated share over the run, + soft overlong vs + clip-higher (lower = fewer cut off)"
                 f"{at(exp, rows[2], rows[1])}", trunc),
            line(f"mechanism: share of groups whose rewards are all equal (no gradient) over the run, + soft overlong vs "
                 f"+ clip-higher (lower = the length penalty gives all-wrong groups a signal){at(exp, rows[2], rows[1])}",
                 flat),
            line(f"mechanism: token entropy over the run, + clip-higher vs GRPO (higher = kept up)"
                 f"{at(exp, rows[1], rows[0])}", ent)]

    return Experiment(
        "DAPO Table 1: the clip-higher and overlong rows at 16 tokens",
        "DAPO Table 1: clip-higher added to naive GRPO raises AIME avg@32 (the row's 36 -> 38), and the soft overlong "
        "punishment added to that raises it again (-> 41), by reducing the reward noise of truncated samples (Sec. 3.4).",
        common("smollm2-short") + ["--wrong-reward", "-1", "--mini-batch-size", "16", "--max-steps", "30"],
        {rows[0]: [], rows[1]: ["--clip-high", "0.28"], rows[2]: ["--clip-high", "0.28", "--overlong-buffer", "4"]},
        check,
        [("held-out acc (last 2 evals)", acc_), ("greedy acc after", final("eval/accuracy")),
         ("truncated", over_run("rollout/truncated_frac")), ("no-gradient groups", over_run("rollout/frac_zero_std")),
         ("all-wrong groups", over_run("rollout/frac_all_wrong")), ("entropy", over_run("policy/entropy")),
         ("clip hi", over_run("policy/clip_frac_high")), ("length", over_run("rollout/response_length"))],
        TABLE_1_PLOTS,
        note=f"{ON_SMOLLM2['smollm2-short']} (45 % of the first responses reach it, 27 % at 32: bench/smollm2_base.py; a "
             "response in the format is 8-9 tokens, one that works the sum out first ~19), the Table 1 form's other "
             "settings: 8 prompts x 8, lr 1e-5, mu = 4, reward +-1, the soft punishment over the last 4 of the 16 "
             "tokens (a quarter, as 8 of 32 there). Only the rows the form is for: GRPO, + clip-higher, + soft overlong "
             "punishment.")


def dapo_worked(rows, acc_):
    """--task smollm2-worked: Table 1's overlong row where right answers are long. Declared after the 16-token form's
    runs, before its own: at 32 tokens no right answer of the base model is longer than 32 (0 of 6 in 512 samples at
    128 tokens: `bench/smollm2_base.py --cut`), so a cut response was never going to be right and DAPO's reward noise
    of truncated samples (Sec. 3.4) did not exist. Asked for the working and read at its last number, 8 of its 41
    right answers run past 32 tokens, and 28 % of the groups have mixed outcomes at 32 (12 % with final-answer). Only
    the overlong row (+ clip-higher vs + the soft punishment): 3 seeds of 2 rows fit a sitting, 3 of 3 do not."""
    def check(exp, runs):
        ol, hi, where = rows[1], rows[0], at(exp, rows[1], rows[0])
        row = compare(exp, ol, hi, acc_)
        trunc = compare(exp, ol, hi, over_run("rollout/truncated_frac"), higher=False)
        flat = compare(exp, ol, hi, over_run("rollout/frac_zero_std"), higher=False)
        train = compare(exp, ol, hi, over_run("rollout/accuracy"))
        return verdict_of([row]), [
            line(f"the overlong row: held-out greedy accuracy (last two evaluations), + soft overlong punishment vs "
                 f"+ clip-higher{where}", row),
            line(f"mechanism: truncated share over the run, + soft overlong vs + clip-higher (lower = fewer cut off)"
                 f"{where}", trunc),
            line(f"mechanism: share of groups whose rewards are all equal (no gradient) over the run, + soft overlong "
                 f"vs + clip-higher{where}", flat),
            line(f"mechanism: training accuracy over the run, + soft overlong vs + clip-higher{where}", train)]

    return Experiment(
        "DAPO Table 1: the overlong row with the working asked for",
        "DAPO Table 1: the soft overlong punishment added to GRPO with clip-higher raises AIME avg@32 (38 -> 41), by "
        "reducing the reward noise of truncated samples, whose reasoning may be sound (Sec. 3.4).",
        common("smollm2-worked") + ["--wrong-reward", "-1", "--mini-batch-size", "16", "--max-steps", "30"],
        {rows[0]: ["--clip-high", "0.28"], rows[1]: ["--clip-high", "0.28", "--overlong-buffer", "8"]},
        check,
        [("held-out acc (last 2 evals)", acc_), ("greedy acc after", final("eval/accuracy")),
         ("train acc", over_run("rollout/accuracy")), ("truncated", over_run("rollout/truncated_frac")),
         ("no-gradient groups", over_run("rollout/frac_zero_std")), ("entropy", over_run("policy/entropy")),
         ("length", over_run("rollout/response_length"))],
        TABLE_1_PLOTS,
        note=f"{ON_SMOLLM2['smollm2-worked']}: after the question \"Work it out step by step, then end your response "
             "with 'The final answer is ANSWER.'\", the answer is the response's last number, and a response cut at "
             "the limit has none (tasks/rg.py format=worked). Before RL (bench/smollm2_base.py, 64 problems x 8): at 32 "
             "tokens in-format accuracy 0.064, 28 % of groups mixed, 41 % cut (the final-answer task: 0.031, 12 %, "
             "27 %); at 128 tokens 8 of the 41 right answers are longer than 32 tokens (final-answer: 0 of 6), so the "
             "limit cuts responses that were going to be right. The Table 1 form's other settings: 8 prompts x 8, lr "
             "1e-5, mu = 4, reward +-1, the soft punishment over the last 8 tokens.")


def dapo_experiments(task="math"):
    if task.startswith("smollm2"):
        return dapo_smollm2(task)
    steps = ["GRPO", "+ overlong filtering", "+ clip-higher", "+ soft overlong punishment", "+ token-level loss",
             "+ dynamic sampling (= DAPO)"]
    cd = task == "countdown"
    adds = [[], ["--overlong-filter"], ["--clip-high", "0.28"], ["--overlong-buffer", "32" if cd else "8"],
            ["--loss-agg", "token-mean"], ["--dynamic-sampling", "--gen-batch-factor", "3"]]
    bar = 0.3 if cd else 0.45  # the greedy accuracy whose first step is compared (Countdown's starts at 0.23)
    variants, acc = {}, []
    for name, add in zip(steps, adds):
        acc = acc + add
        variants[name] = list(acc)

    def check(exp, runs):
        k = "eval/avg@4"
        top = compare(exp, steps[-1], steps[0], final(k))
        steps_to = compare(exp, steps[-1], steps[0], first_step_at("eval/accuracy", bar), higher=False)
        rises = sum(statistics.mean(per_seed(exp, b, final(k))) > statistics.mean(per_seed(exp, a, final(k)))
                    for a, b in zip(steps, steps[1:]))
        return verdict_of([top]), [line("final avg@4, DAPO vs GRPO", top),
                                   line(f"steps to greedy accuracy {bar} (nan = never), DAPO vs GRPO (fewer is better)", steps_to),
                                   f"techniques that raised mean avg@4 when added: {rises} of {len(steps) - 1}"]

    base = COMMON + ["--wrong-reward", "-1", "--max-new-tokens", "32", "--mini-batch-size", "32", "--max-steps", "20",
                     "--eval-every", "5", "--eval-samples", "4", "--eval-temperature", "1.0", "--eval-top-p", "0.7"]
    note = ("Lengths: --max-new-tokens 32 truncates the worked solutions of the deepest sums (~50 tokens), so the two "
            "overlong techniques have responses to act on (DAPO: 16K + 4K cache of 20K). mu = 4 (mini-batches of 32 of "
            "the 128 responses; DAPO's is 16), reward +-1 in every row, the dapo recipe's generation factor 3.")
    if cd:
        base = common(task) + ["--wrong-reward", "-1", "--mini-batch-size", "32", "--max-steps", "30",
                               "--eval-every", "10", "--eval-samples", "4", "--eval-temperature", "1.0",
                               "--eval-top-p", "0.7"]
        note = ("Countdown level 1, the shipped cold start, its defaults: 128 tokens, which 40-56 % of the first steps' "
                "searches reach (an attempt is ~24 tokens: four or five fit), so the overlong filter and the soft "
                "punishment (the last 32 tokens, the dapo recipe's 16 of 64 scaled) act on a large share of the batch, as "
                "they do on DAPO's longest responses. lr 3e-4 (the Countdown default), mu = 4, reward +-1 in every row, "
                "the dapo recipe's generation factor 3; 30 steps.")
    return [Experiment(
        "DAPO Table 1: the cumulative ablation",
        "DAPO Table 1: each technique added to naive GRPO raises AIME avg@32 (30 -> 36 -> 38 -> 41 -> 42 -> 50).",
        base, variants, check,
        [("greedy acc", final("eval/accuracy")), ("avg@4", final("eval/avg@4")), ("pass@4", final("eval/pass@4")),
         (f"steps to {bar}", first_step_at("eval/accuracy", bar)), ("truncated", over_run("rollout/truncated_frac")),
         ("clip hi", over_run("policy/clip_frac_high")), ("entropy", over_run("policy/entropy")),
         ("length", over_run("rollout/response_length"))],
        TABLE_1_PLOTS,
        note=note)]


def entropy_smollm2(task):
    """DAPO Sec. 3.1 / Skywork Sec. 3.7 on SmolLM2-135M-Instruct, whose entropy at 32 tokens starts at 1.4-2.1
    nats/token and collapses as it learns (docs/reproduce_entropy_smollm2*.md): mu 1 with the symmetric clip, mu 8
    with each clip. The toy forms' fourth variant (clip-higher at mu 1: identical to the symmetric clip, nothing is
    clipped) is left out."""
    sym, hi = ["--clip-high", "0.2"], ["--clip-high", "0.28"]
    variants = {"eps 0.2/0.2, mu 1": sym, "eps 0.2/0.2, mu 8": sym + ["--mini-batch-size", "8"],
                "eps 0.2/0.28, mu 8": hi + ["--mini-batch-size", "8"]}
    ent = last("policy/entropy", 5)

    def check(exp, runs):
        keep = compare(exp, "eps 0.2/0.28, mu 8", "eps 0.2/0.2, mu 8", ent)
        faster = compare(exp, "eps 0.2/0.2, mu 8", "eps 0.2/0.2, mu 1", ent, higher=False)
        clip = compare(exp, "eps 0.2/0.28, mu 8", "eps 0.2/0.2, mu 8", over_run("policy/clip_frac_high"), higher=False)
        a, b, c = "eps 0.2/0.28, mu 8", "eps 0.2/0.2, mu 8", "eps 0.2/0.2, mu 1"
        return verdict_of([keep, faster]), [
            line(f"entropy (last 5 steps), mu 8: clip-higher vs symmetric (higher = kept up){at(exp, a, b)}", keep),
            line(f"entropy (last 5 steps), symmetric: mu 8 vs mu 1 (lower = collapses faster off-policy){at(exp, b, c)}",
                 faster),
            line(f"mechanism: share of tokens clipped on the high side, mu 8: clip-higher vs symmetric{at(exp, a, b)}",
                 clip)]

    return [Experiment(
        "Entropy: clip-higher and off-policy updates",
        "DAPO Sec. 3.1 (Fig. 2): with the symmetric clip the entropy collapses; clip-higher (eps_high 0.28) keeps it up. "
        "Skywork-OR1 Sec. 3.7 / 4: more off-policy updates per rollout (N_SGD > 1) collapse entropy faster.",
        common(task) + ["--loss-agg", "token-mean", "--max-steps", "30"], variants, check,
        [("entropy, first 5", lambda r: statistics.mean(m["policy/entropy"] for m in r.metrics[:5])),
         ("entropy, last 5", ent), ("clip hi", over_run("policy/clip_frac_high")),
         ("clip lo", over_run("policy/clip_frac_low")), ("held-out acc (last 2 evals)", held_out()),
         ("truncated", over_run("rollout/truncated_frac")), ("length", over_run("rollout/response_length"))],
        [("token entropy", "policy/entropy"), ("train accuracy", "rollout/accuracy"),
         ("clip fraction (high)", "policy/clip_frac_high"), ("held-out greedy accuracy", "eval:eval/accuracy")],
        note=f"{ON_SMOLLM2[task]}, 8 prompts x 8, lr 1e-5, token-mean in all three; mu 8 = mini-batches of 8 of the "
             "64 responses.")]


def entropy_experiments(task="math"):
    if task.startswith("smollm2"):
        return entropy_smollm2(task)
    sym, hi = ["--clip-high", "0.2"], ["--clip-high", "0.28"]
    variants = {"eps 0.2/0.2, mu 1": sym, "eps 0.2/0.28, mu 1": hi,
                "eps 0.2/0.2, mu 8": sym + ["--mini-batch-size", "16"], "eps 0.2/0.28, mu 8": hi + ["--mini-batch-size", "16"]}

    def check(exp, runs):
        ent = last("policy/entropy", 5)
        same = all([m["policy/entropy"] for m in a.metrics] == [m["policy/entropy"] for m in b.metrics]
                   for a, b in zip(runs["eps 0.2/0.2, mu 1"], runs["eps 0.2/0.28, mu 1"]))
        keep = compare(exp, "eps 0.2/0.28, mu 8", "eps 0.2/0.2, mu 8", ent)
        faster = compare(exp, "eps 0.2/0.2, mu 8", "eps 0.2/0.2, mu 1", ent, higher=False)
        return verdict_of([keep, faster]), [
            f"mu 1: clip-higher changes nothing (ratio = 1, nothing is clipped): entropy series identical in every seed: {same}",
            line("entropy (last 5 steps), mu 8: clip-higher vs symmetric (higher = kept up)", keep),
            line("entropy (last 5 steps), symmetric: mu 8 vs mu 1 (lower = collapses faster off-policy)", faster)]

    return [Experiment(
        "Entropy: clip-higher and off-policy updates",
        "DAPO Sec. 3.1 (Fig. 2): with the symmetric clip the entropy collapses; clip-higher (eps_high 0.28) keeps it up. "
        "Skywork-OR1 Sec. 3.7 / 4: more off-policy updates per rollout (N_SGD > 1) collapse entropy faster.",
        common(task) + ["--loss-agg", "token-mean", "--max-steps", "30", "--eval-every", "0", "--eval-samples", "0"],
        variants, check,
        [("entropy, first 5", lambda r: statistics.mean(m["policy/entropy"] for m in r.metrics[:5])),
         ("entropy, last 5", last("policy/entropy", 5)), ("clip hi", over_run("policy/clip_frac_high")),
         ("clip lo", over_run("policy/clip_frac_low")), ("greedy acc", final("eval/accuracy")),
         ("length", over_run("rollout/response_length"))],
        [("token entropy", "policy/entropy"), ("train accuracy", "rollout/accuracy"),
         ("clip fraction (high)", "policy/clip_frac_high")],
        note="mu 8 = mini-batches of 16 of the 128 responses; token-mean loss in all four." + (
            f" {ON_COUNTDOWN}." if task == "countdown" else ""))]


def skywork_experiments(task="math"):
    sm = task.startswith("smollm2")
    # Skywork's target 0.2; on SmolLM2's two-digit task 0.5 (the note says why)
    target = 0.5 if task == "smollm2" else 0.2
    adaptive = f"adaptive, target {target}"
    variants = {"no entropy term": [], "fixed alpha 2e-2": ["--entropy-coef", "2e-2"],
                "fixed alpha 2e-1": ["--entropy-coef", "2e-1"],
                adaptive: ["--adaptive-entropy", "--entropy-target", str(target), "--entropy-delta", "1e-2",
                           "--entropy-max", "2e-1"]}

    def dist(r):  # mean |entropy - target| over the second half of the run
        vals = [m["policy/entropy"] for m in r.metrics[len(r.metrics) // 2:]]
        return statistics.mean(abs(v - target) for v in vals) if vals else float("nan")

    def check(exp, runs):
        parts = [compare(exp, adaptive, v, dist, higher=False) for v in variants if not v.startswith("adaptive")]
        return verdict_of(parts), [line(f"|entropy - target| over the second half: adaptive vs {v} (lower = held)", p)
                                   for v, p in zip([v for v in variants if not v.startswith("adaptive")], parts)]

    table = [("entropy, first 5", lambda r: statistics.mean(m["policy/entropy"] for m in r.metrics[:5])),
             ("entropy, last 5", last("policy/entropy", 5)), ("controller's estimate, last 5",
             last("policy/entropy_estimate", 5)), ("|e - target|, 2nd half", dist),
             ("coef, last 5", last("policy/entropy_coef", 5)), ("greedy acc", final("eval/accuracy")),
             ("length", over_run("rollout/response_length"))]
    if sm:  # a reading, not in the checks: how far above the target the entropy went once the bonus had lifted it
        table.insert(4, ("peak, 2nd half", lambda r: max(m["policy/entropy"] for m in r.metrics[len(r.metrics) // 2:])))
    plots = [("token entropy", "policy/entropy"), ("entropy coefficient", "policy/entropy_coef"),
             ("train accuracy", "rollout/accuracy")]
    base = common(task) + (["--loss-agg", "token-mean", "--mini-batch-size", "32", "--max-steps", "30"] if sm else
                           ["--loss-agg", "token-mean", "--mini-batch-size", "64", "--max-steps", "30", "--eval-every",
                            "0", "--eval-samples", "0"])
    def against_no_term(name, variant, flags, what, note):
        """A later SmolLM2 form, declared before its runs: one adaptive variant against the first form's no-term runs
        (the same flags: read, not run again)."""
        def check(exp, runs):
            p = compare(exp, variant, "no entropy term", dist, higher=False)
            return verdict_of([p]), [line(f"|entropy - target| over the second half: adaptive ({what}) vs no entropy "
                                          "term (lower = held)", p)]
        return Experiment(name, "Skywork-OR1 Sec. 3.2 (Eq. 3.2, Figs. 9-10): the adaptive coefficient holds the "
                          "entropy near its target, where without an entropy term it collapses past it.",
                          base, {"no entropy term": [], variant: flags}, check, table, plots,
                          shared={"no entropy term": "Skywork-OR1: adaptive entropy control"}, note=note)

    fast = ["--adaptive-entropy", "--entropy-target", str(target), "--entropy-delta", "3e-2", "--entropy-max", "2e-1"]
    later = [
        # a controller fast enough for 30 steps
        against_no_term(
            "Skywork-OR1: adaptive entropy control, a faster controller", f"adaptive, target {target}, delta 3e-2",
            fast, "delta 3e-2",
            f"{ON_SMOLLM2[task]}, the first form's settings (target 0.5, cap 2e-1, N_SGD 2) with the "
            "controller's step Delta 3e-2 instead of 1e-2: there the coefficient ramped for 11-12 steps once the "
            "controller's estimate stayed below 0.5 (from steps 14-15) before it reached the 0.12-0.14 that lifted "
            "the entropy (steps 26-28), so most of the second half it is judged on was the ramp; at 3e-2 that takes "
            "4-5 steps. The no-entropy-term runs are the first form's (the same flags: read, not run again)."),
        # Eq. 3.2's timing: the switch read from this step's rollout
        against_no_term(
            "Skywork-OR1: adaptive entropy control, the paper's timing",
            f"adaptive, target {target}, delta 3e-2, paper timing", fast + ["--entropy-timing", "paper"],
            "delta 3e-2, the paper's timing",
            f"{ON_SMOLLM2[task]}, the second form's settings (target 0.5, Delta 3e-2, cap 2e-1, N_SGD 2) "
            "with Eq. 3.2's timing (--entropy-timing paper: alpha_k = c_k * 1{e_k <= target}, e_k from this "
            "step's rollout under pi_old, one extra forward pass) instead of the released code's (e_{k-1}, the "
            "previous rollout's). Why: in the second form the lag kept the full bonus 0.2 on for the step after "
            "the entropy had crossed the target (seed 0 step 22: entropy 0.63 while the estimate read 0.42; seed 1 "
            "step 26: 0.89 against 0.47), right before it rose to 1.03 / 1.37. The no-entropy-term runs are the "
            "first form's (read, not run again)."),
    ] if task == "smollm2" else []

    return [Experiment(
        "Skywork-OR1: adaptive entropy control",
        "Skywork-OR1 Sec. 3.2 (Eq. 3.2, Figs. 9-10): the adaptive coefficient holds the entropy near its target; a fixed "
        "coefficient either lets it collapse (small) or makes it blow up (large).",
        base, variants, check, table, plots,
        note=(f"{ON_SMOLLM2[task]}, 8 prompts x 8, lr 1e-5. N_SGD = 2 (mini-batches of 32), token-mean. The "
              "entropy compared is the policy's token entropy (policy/entropy); the controller reads the sampled-token "
              "NLL of the previous rollout. " + (
                  "Skywork's target 0.2: this model starts at ~1.4 nats/token and falls below 0.2 within ~15 steps "
                  "without a bonus (docs/reproduce_entropy_smollm2-easy_x10.md), so the controller acts from then on; "
                  if target == 0.2 else
                  "The target is 0.5, not Skywork's 0.2: on this task the entropy falls from ~2 nats/token at step 1 "
                  "to 0.12-0.35 over steps 16-30 with no entropy term (the 20 dapo, entropy and compass runs kept in "
                  "docs/smollm2_runs/reproduce/), i.e. it ends at 0.2 on its own and nothing would be held; it falls "
                  "below 0.5 by step 4-14 in every one of them and stays 0.19-0.38 below it, the collapse past a "
                  "target that Skywork's control is for. ") + "Delta = 1e-2 and the cap 2e-1 as in the math form (30 "
              "steps need a faster controller than Skywork's).") if sm else
             "N_SGD = 2 (mini-batches of 64), token-mean. The entropy compared is the policy's token entropy "
             "(policy/entropy), logged in every variant; the controller itself reads the sampled-token NLL of the previous "
             "rollout, whose expectation under on-policy sampling at T = 1 is that entropy (its last values are in the "
             "table for the adaptive run). The target is Skywork's 0.2 (" + ("the math" if task == "countdown" else "this") +
             " model's entropy starts near 0.2); the step Delta = 1e-2 and the cap 2e-1 are scaled up: at 2e-2 (a first run, kept in the table) the bonus did "
             "not slow the collapse at all on this model, and 30 steps need a faster controller than Skywork's "
             "Delta = 1e-4 (code) / 5e-3 (paper) with cap 5e-3 over thousands of steps." + (
                 f" {ON_COUNTDOWN}; its entropy starts at 0.13, below the target, so the controller's bonus pushes it "
                 "up from the first steps." if task == "countdown" else ""))] + later


def ringlite_experiments(task="math"):
    cd, sm = task == "countdown", task.startswith("smollm2")
    # Ring-lite's KL 1e-3 and entropy bonus 5e-4; on SmolLM2 without the bonus (a first run with it: see the note)
    base = common(task) + ["--kl-coef", "1e-3"] + ([] if sm else ["--entropy-coef", "5e-4"]) + ["--max-steps", "30"] + (
        [] if sm else ["--eval-every", "0", "--eval-samples", "0"]) + ["--loss-agg", "token-mean", "--stages", ""]
    # below every step's response tokens (Countdown: the c3po recipe's 4,096 x 128 / 64; SmolLM2: its 64 responses
    # fall from ~15 to ~7-9 tokens each as it learns the format, docs/reproduce_dapo_smollm2.md, ~1,000 -> ~470 a step)
    budget = 8192 if cd else 448 if sm else 1024
    c3po_, n = f"C3PO (budget {budget})", 64 if sm else 128  # n: responses a step

    def tokens(r):  # tokens in the loss per update: C3PO's selection, else every response token of the step
        return [m.get("c3po/tokens_used", m["rollout/response_length"] * n) for m in r.metrics]

    def tokens_cv(r):  # tokens per update, sd / mean over steps
        return statistics.stdev(tokens(r)) / statistics.mean(tokens(r))

    def check_a(exp, runs):
        tok = compare(exp, c3po_, "GRPO", tokens_cv, higher=False)
        gn = compare(exp, c3po_, "GRPO", cv("perf/grad_norm"), higher=False)
        return verdict_of([tok, gn]), [line("tokens per update, sd / mean over steps: C3PO vs GRPO", tok),
                                      line("grad norm, sd / mean over steps: C3PO vs GRPO", gn)]

    exps = [
        Experiment(
            "Ring-lite Fig. 7: C3PO's constant token budget",
            "Ring-lite Sec. 3.2, Fig. 7: under GRPO the tokens per update and the gradient norm move with the response "
            "length; C3PO's fixed token budget makes the tokens per update constant and the gradient norm steadier.",
            base, {"GRPO": [], c3po_: ["--algorithm", "c3po", "--token-budget", str(budget)]}, check_a,
            [("tokens/update mean", lambda r: statistics.mean(tokens(r))),
             ("tokens/update sd/mean", tokens_cv),
             ("grad norm mean", over_run("perf/grad_norm")), ("grad norm sd/mean", cv("perf/grad_norm")),
             ("response length", over_run("rollout/response_length")), ("greedy acc", final("eval/accuracy"))],
            [("tokens per update", tokens), ("grad norm", "perf/grad_norm"), ("response length", "rollout/response_length")]
            + ([("held-out greedy accuracy", "eval:eval/accuracy")] if sm else []),
            note=("Ring-lite's other settings (KL 1e-3, mu 1) in both; GRPO with token-mean. " if sm else
                  "Ring-lite's other settings (KL 1e-3, entropy 5e-4, mu 1) in both; GRPO with token-mean. ") + (
                f"{ON_COUNTDOWN}: a step's 128 responses hold ~10-14K tokens, so the budget 8192 binds on every step."
                if cd else
                f"{ON_SMOLLM2[task]}, 8 prompts x 8, lr 1e-5: in the dapo runs a step's 64 responses held ~1,000 "
                "tokens at the start and ~470-600 once the model answered in one sentence, so the budget 448 is below "
                "every step's tokens. Ring-lite's entropy bonus (5e-4) is left out: a first run with it (C3PO at a "
                "budget of 384, seed 0, kept in docs/smollm2_runs/reproduce/ringlite/, outside this table) had no "
                "right response among its 64 in any of 30 steps, so every advantage was 0 and the bonus was the only "
                "gradient; Adam scales a lone gradient to the lr whatever its size, and the entropy rose from 2.3 to "
                "7.3 nats/token and the responses from 16 to 30 tokens, away from the one-sentence answer (held-out "
                "greedy 0.109 -> 0.031)." if sm else
                "The budget 1024 is below the step's ~1.5-3K response tokens, so it binds on every step."))]
    if task != "smollm2":
        return exps
    # A second form, declared after the first's runs and before its own: there the budget often took no group with
    # mixed outcomes (no policy gradient), an on/off norm. Ring-lite Sec. 3.2 trains with "token-budgeted dynamic
    # sampling" and does not define its filter; here it is DAPO's (mixed groups only, the dapo recipe's factor 3), on
    # both sides, so that every update of either has a policy gradient.
    ds = ["--dynamic-sampling", "--gen-batch-factor", "3"]
    grpo_ds, c3po_ds = "GRPO + dynamic sampling", f"C3PO (budget {budget}) + dynamic sampling"

    def dead(r):  # updates without a policy gradient: only the KL term's (grad norm < 0.02, the first form's reading)
        return sum(m["perf/grad_norm"] < 0.02 for m in r.metrics)

    def follows(r):  # the norm against the tokens per update: corr(grad norm, 1 / sqrt(tokens)); nan where constant
        g, t = [m["perf/grad_norm"] for m in r.metrics], [x ** -0.5 for x in tokens(r)]
        return statistics.correlation(g, t) if len(g) > 2 and len(set(t)) > 1 else float("nan")

    def sharpens(r):  # the norm against the entropy (added after the first seed's runs, a reading, not the check)
        return statistics.correlation([m["perf/grad_norm"] for m in r.metrics], [m["policy/entropy"] for m in r.metrics])

    def check_ds(exp, runs):
        tok = compare(exp, c3po_ds, grpo_ds, tokens_cv, higher=False)
        gn = compare(exp, c3po_ds, grpo_ds, cv("perf/grad_norm"), higher=False)
        return verdict_of([tok, gn]), [
            line("tokens per update, sd / mean over steps: C3PO vs GRPO, both with dynamic sampling", tok),
            line("grad norm, sd / mean over steps: C3PO vs GRPO, both with dynamic sampling", gn),
            "mechanism: updates without a policy gradient (grad norm < 0.02), per seed: C3PO " + ", ".join(
                f"{dead(r)}/{len(r.metrics)}" for r in runs[c3po_ds]) + "; GRPO " + ", ".join(
                f"{dead(r)}/{len(r.metrics)}" for r in runs[grpo_ds]),
            "mechanism: GRPO's grad norm against its tokens per update, corr(grad norm, 1 / sqrt(tokens)) over steps, "
            "per seed: " + ", ".join(f"{follows(r):.2f}" for r in runs[grpo_ds]),
            "mechanism: the grad norm against the policy's sharpening, corr(grad norm, token entropy) over steps, per "
            "seed: C3PO " + ", ".join(f"{sharpens(r):.2f}" for r in runs[c3po_ds]) + "; GRPO " + ", ".join(
                f"{sharpens(r):.2f}" for r in runs[grpo_ds])]

    exps.append(Experiment(
        "Ring-lite Fig. 7: C3PO with token-budgeted dynamic sampling",
        exps[0].claim + " Sec. 3.2 trains C3PO with \"token-budgeted dynamic sampling\".",
        base + ds, {grpo_ds: [], c3po_ds: ["--algorithm", "c3po", "--token-budget", str(budget)]}, check_ds,
        exps[0].table[:4] + [("corr(norm, tokens^-1/2)", follows), ("corr(norm, entropy)", sharpens),
                             ("entropy", over_run("policy/entropy")), ("responses used", over_run("c3po/responses_used")),
                             ("groups kept / generated", over_run("rollout/groups_kept_frac")),
                             ("held-out acc (last 2 evals)", held_out())],
        exps[0].plots + [("token entropy", "policy/entropy")],
        note=f"The first form's settings (KL 1e-3, mu 1, no entropy bonus, token-mean GRPO, budget {budget}) with "
             "dynamic sampling in both (only groups with mixed outcomes kept, 3 x 8 prompts a generation round): in the "
             "first form the budget took the first 4-5 of the 8 groups, and on 8-16 of C3PO's 30 steps none of them "
             "had mixed outcomes, so the update had no policy gradient and the norm went on and off. This form was "
             "declared after that form's runs and before its own."))
    return exps


def ringlite_stages_experiments():
    stages = "data=builtin-math reward=math max_new_tokens=64 steps={m}; data=builtin-code reward=code max_new_tokens=96 " \
             "eval_problems=100 steps={c}"
    joint = "; ".join(["data=builtin-math reward=math max_new_tokens=64 steps=1; "
                       "data=builtin-code reward=code max_new_tokens=96 eval_problems=100 steps=1"] * 10)

    def check_b(exp, runs):
        m = compare(exp, "two-stage (math, then code)", "joint (math and code steps alternate)", final("eval/math/accuracy"))
        c = compare(exp, "two-stage (math, then code)", "joint (math and code steps alternate)", final("eval/code/accuracy"))
        return verdict_of([m, c]), [line("final math accuracy: two-stage vs joint", m), line("final code accuracy: two-stage vs joint", c)]

    b_base = COMMON + ["--recipe", "c3po", "--batch-size", "64", "--mini-batch-size", "64", "--max-steps", "20", "--eval-every", "0", "--eval-samples", "0"]
    return [
        Experiment(
            "Ring-lite: two-stage math -> code vs a joint mix",
            "Ring-lite Sec. 3.4, Tables 3-4: RL on math first, then code (length limit raised), beats mixing the domains "
            "in one stage.",
            b_base, {"two-stage (math, then code)": ["--stages", stages.format(m=10, c=10)],
                     "joint (math and code steps alternate)": ["--stages", joint]}, check_b,
            [("math acc before", lambda r: r.summary["before"]["eval/math/accuracy"]), ("math acc after", final("eval/math/accuracy")),
             ("code acc before", lambda r: r.summary["before"]["eval/code/accuracy"]), ("code acc after", final("eval/code/accuracy"))],
            [("train accuracy", "rollout/accuracy"), ("response length", "rollout/response_length")],
            note="The c3po recipe on the math + code tiny model, 8 prompts x 8 per step, 20 steps either way: 10 math then "
                 "10 code, or alternating. 'Joint' alternates whole steps (each batch is one domain), the nearest "
                 "schedule --stages expresses; Ring-lite's joint runs mix domains within a batch.")]


def mimo_experiments(task="math"):
    cd, sm = task == "countdown", task.startswith("smollm2")
    n = 64 if sm else 128  # responses a step
    seam = common(task) + ["--dynamic-sampling", "--mini-batch-size", str(n), "--max-steps", "12", "--eval-every", "0",
                           "--eval-samples", "0"] + (["--max-gen-rounds", "20"] if sm else [])

    def waste(r):
        return statistics.mean(1 - n / m["rollout/generated"] for m in r.metrics)

    def check_a(exp, runs):
        t = compare(exp, "seamless", "naive", over_run("perf/gen_time_s"), higher=False)
        w = compare(exp, "seamless", "naive", waste, higher=False)
        return verdict_of([t, w]), [line("rollout seconds per step: seamless vs naive", t),
                                   line("share of generated responses discarded: seamless vs naive", w)]

    pool = common(task) + ["--dynamic-sampling", "--mini-batch-size", "32", "--max-steps", "24", "--eval-every", "0",
                           "--eval-samples", "0", "--train-problems", "256"]
    if sm:  # the level mix, where level 1's prompts get solved (MiMo's pool holds the problems the model has mastered)
        pool = smollm2_levels() + ["--dynamic-sampling", "--mini-batch-size", "16", "--max-steps", "24",
                                   "--max-gen-rounds", "20", "--train-problems", "64"]
    acc = held_out() if sm else final("eval/accuracy")

    def eff(r):  # kept / generated over the last 8 steps: the sampling efficiency
        return statistics.mean(n / m["rollout/generated"] for m in r.metrics[-8:])

    def check_b(exp, runs):
        e = compare(exp, "easy pool (alpha 0.1)", "no pool", eff)
        d = compare(exp, "easy pool (alpha 0.1)", "drop solved", acc)
        return verdict_of([e, d]), [line("sampling efficiency (kept / generated, last 8 steps): easy pool vs no pool", e),
                                   line("final greedy accuracy: easy pool vs dropping solved prompts"
                                        + (" (last two evaluations)" if sm else ""), d)]

    return [
        Experiment(
            "MiMo Sec. 3.4.1: seamless rollout vs naive dynamic sampling",
            "MiMo Sec. 3.4.1: the seamless rollout engine (launches sized by the pass rate, scoring overlapped with "
            "generation, early termination) cuts the rollout time and the wasted generations of dynamic sampling.",
            seam, {"naive": [], "seamless": ["--seamless"]}, check_a,
            [("rollout s/step", over_run("perf/gen_time_s")), ("step s", over_run("perf/step_time_s")),
             ("generated/step", over_run("rollout/generated")), ("discarded share", waste)],
            [("rollout seconds", "perf/gen_time_s"), ("responses generated", "rollout/generated")],
            note=(f"{ON_SMOLLM2[task]}, 8 prompts x 8, lr 1e-5, mu 1, up to 20 generation rounds a step. Waves on "
                  "the fast engine (vLLM's continuous batching is the --rollout vllm path): the saving is the launch "
                  "sizing and the overlap of scoring with generation. The seconds depend on what else shares the "
                  "cores; the generated counts do not.") if sm else
                 "Waves on the default engine (vLLM's continuous batching is the --rollout vllm path): the saving is the "
                 "launch sizing and the overlap of scoring with generation. Two runs share the 2 cores, so the seconds "
                 "are noisy; the generated counts are not." + (f" {ON_COUNTDOWN}." if cd else "")),
        Experiment(
            "MiMo Sec. 3.3: easy-data resampling",
            "MiMo Sec. 3.3: as more problems reach a 100% pass rate, dynamic sampling wastes more generations; moving them "
            "to an easy pool sampled at alpha = 10% keeps the sampling efficiency up, and (unlike dropping them) keeps "
            "the policy stable.",
            pool, {"no pool": [], "easy pool (alpha 0.1)": ["--easy-pool-alpha", "0.1"], "drop solved": ["--drop-solved"]},
            check_b,
            [("efficiency, last 8", eff), ("gen rounds", over_run("rollout/gen_rounds")), ("greedy acc", final("eval/accuracy")),
             ("easy share", over_run("data/easy_slot_share"))] + ([("held-out acc (last 2 evals)", acc)] if sm else []),
            [("kept / generated", lambda r: ([m["step"] for m in r.metrics], [n / m["rollout/generated"] for m in r.metrics])),
             ("train accuracy", "rollout/accuracy")],
            note=(f"{ON_LEVELS}, 8 prompts x 8, lr 1e-5, mu = 4, up to 20 generation rounds a step. 'drop "
                  "solved' = --drop-solved: a prompt solved perfectly once leaves the pool for good. "
                  "--train-problems 64: the ~200+ prompts drawn in 24 steps cover them "
                  "several times, as MiMo's epochs do.") if sm else
                 "mu = 4. 'drop solved' = --drop-solved: a prompt solved perfectly once leaves the pool for good. "
                 "--train-problems 256: the ~850 prompts drawn in 24 steps then cover the data about three times, as "
                 "MiMo's epochs do" + (f". {ON_COUNTDOWN}." if cd else
                 "; over the 20,000 built-in problems (a first run, same settings otherwise) a solved "
                 "prompt was rarely drawn again, and the pool could only cost efficiency (0.382 vs 0.424 kept / generated).")),
    ]


def mimo_code_experiments():
    code = COMMON + ["--train-data", "builtin-code", "--batch-size", "64", "--mini-batch-size", "64", "--max-new-tokens", "96",
                     "--max-steps", "12", "--eval-problems", "100", "--eval-every", "0", "--eval-samples", "0"]

    def hard(r):
        return over_run("rollout/signal_frac_level3")(r)

    def check(exp, runs):
        s = compare(exp, "soft", "strict", hard)
        return verdict_of([s]), [line("share of level-3 groups with a signal (rewards not all equal): soft vs strict", s)]

    return [Experiment(
        "MiMo Sec. 3.3.1: strict vs soft test-difficulty reward on code",
        "MiMo Sec. 3.3.1: with the strict reward hard problems rarely get any signal; the soft reward (partial credit "
        "per passed test) gives them one.",
        code, {"strict": ["--reward", "code-strict"], "soft": ["--reward", "code-soft"]}, check,
        [("level-3 groups with signal", hard), ("level-1 groups with signal", over_run("rollout/signal_frac_level1")),
         ("code acc after", final("eval/accuracy")), ("code score after", final("eval/score"))],
        [("level-3 groups with signal", "rollout/signal_frac_level3"), ("train accuracy (all tests)", "rollout/accuracy")],
        note="The built-in code task (3 test levels, 2 tests each), 8 prompts x 8 per step, plain GRPO so that every "
             "generated group is counted (no filter).")]


def compass_experiments(task="math"):
    cd, sm = task == "countdown", task.startswith("smollm2")
    hard = (2,) if cd or sm else (4, 5)  # the hardest levels of the task's mix

    def hard_acc(r, e):
        return sum(e.get(f"eval/accuracy_level{k}", 0) for k in hard) / len(hard)

    # the real model's runs: the last two evaluations (greedy every 10 steps), as its other forms
    acc = held_out() if sm else final("eval/accuracy")
    acc_hard = held_out("eval/accuracy_level2") if sm else (lambda r: hard_acc(r, r.summary["after"]))
    last_ = " (last two evaluations)" if sm else ""

    def check(exp, runs):
        a = compare(exp, "staged easy -> hard", "uniform mix", acc)
        h = compare(exp, "staged easy -> hard", "uniform mix", acc_hard)
        return verdict_of([a, h]), [line(f"final greedy accuracy{last_}: staged vs uniform", a),
                                   line(f"final accuracy on level{'s 4-5' if not (cd or sm) else ' 2'}{last_}: staged "
                                        "vs uniform", h)]

    levels = (1, 2) if cd or sm else (1, 2, 3, 4, 5)
    base = COMMON + ["--recipe", "compass", "--max-steps", "30", "--eval-every", "5", "--eval-samples", "0"]
    note = ("The compass recipe (+-1 reward, clip-higher, token-mean, dynamic sampling) either way, at mu = 1 (the shared "
            "--mini-batch-size 128 wins over the recipe's 16: the stages are compared, not the updates per rollout); "
            "the uniform mix is the same run with --curriculum ''.")
    if cd:
        base = COMMON + ["--train-data", "builtin-countdown:1,2", "--recipe", "compass", "--max-steps", "30",
                         "--eval-every", "10", "--eval-samples", "0", "--max-gen-rounds", "20"]
        note += (" Countdown levels 1-2 (3 numbers and two steps; 4 numbers, two steps and a distractor), the held-out "
                 "set the same mix. The cold start was SFT'd on level 1 alone: greedy 0.23 at level 1, 0.035 at level 2 "
                 "and 0 at level 3 (150 held-out problems of levels 1-3, 128 tokens), so level 2 is a cliff, as the hard "
                 "levels of a real curriculum are, and level 3 (no signal at all) is left out. The stages' mixes are "
                 "compass_stages' over the two levels (renormalised): 4:3, then 1:2, then level 2 alone, against 1:1; "
                 "up to 20 generation rounds a step (the recipe's 10 can fall short of 16 mixed groups on level 2). "
                 "The shipped cold start and the Countdown defaults (128 tokens, lr 3e-4).")
    elif sm:
        base = smollm2_levels() + ["--recipe", "compass", "--mini-batch-size", "64", "--gen-batch-factor", "3",
                                   "--max-gen-rounds", "20", "--max-steps", "30"]
        note = ("The compass recipe (+-1 reward, clip-higher, token-mean, dynamic sampling) either way, at mu = 1 (the "
                "stages are compared, not the updates per rollout); the uniform mix is the same run with "
                f"--curriculum ''. {ON_LEVELS}, 8 prompts x 8, lr 1e-5; the held-out set the same mix (24 "
                "problems a level). Before RL, level 2 has 6 % of its groups mixed (level 1 12 %) and its level 3 "
                "none, which is left out. The stages' mixes are "
                "compass_stages' over the two levels (renormalised): 4:3, then 1:2, then level 2 alone, against 1:1; "
                "generation factor 3 (the dapo recipe's) and up to 20 rounds a step.")
    else:
        note += (" Level 4 trails level 5 in both, as in the default run: the shipped cold start copies the 4th of five "
                 "operands right in 20 of the 84 held-out level-4 problems (given the steps), and RL does not teach it "
                 "(docs/runs.md; python bench/addition_levels.py).")

    return [Experiment(
        "Compass-Thinker: staged curriculum",
        "Compass-Thinker Sec. 3-4: training in stages of increasing difficulty beats one uniform mix of all levels.",
        base, {"staged easy -> hard": [], "uniform mix": ["--curriculum", ""]}, check,
        [("greedy acc", final("eval/accuracy"))] + [(f"level {k}", final(f"eval/accuracy_level{k}")) for k in levels]
        + ([("length", over_run("rollout/response_length")), ("gen rounds", over_run("rollout/gen_rounds"))] if cd else [])
        + ([("held-out acc (last 2 evals)", acc), ("level 2 (last 2 evals)", acc_hard),
            ("zero-var groups", over_run("rollout/frac_zero_std")), ("gen rounds", over_run("rollout/gen_rounds"))]
           if sm else []),
        [(f"held-out accuracy, level {k}", f"eval:eval/accuracy_level{k}")
         for k in ((1, 2) if sm else (levels[0], levels[len(levels) // 2], levels[-1]))]
        + [("held-out accuracy", "eval:eval/accuracy")],
        note=note)]


def async_experiments(task="math"):
    cd, sm = task == "countdown", task.startswith("smollm2")
    sync, lag = "K 0 (synchronous)", "K 1 (one step off-policy)"

    def check(exp, runs):
        acc = final("eval/accuracy")
        worse = compare(exp, sync, lag, acc)  # does the synchronous loop end ahead by more than the seeds' spread?
        steps = sorted({e["step"] for r in runs[sync] for e in r.evals if e["step"]})
        mid = [compare(exp, sync, lag, lambda r, s=s: next(e["eval/accuracy"] for e in r.evals if e["step"] == s))
               for s in steps[:-1]]
        exact = all(m.get("async/lag") == (0 if m["step"] == 1 else 1) for r in runs[lag] for m in r.metrics)
        ahead = [s for s, c in zip(steps, mid) if c[0]]
        m, w, n, a, b = worse
        # equal per step: no gap beyond the seeds' spread, and the seeds split; a gap of one sign in every seed that
        # the spread still covers is "partly" (a small cost of the lag that 3 seeds cannot resolve)
        verdict = "does not" if m or ahead or not exact else "partly" if w == n else "reproduces"
        return verdict, [
            f"final greedy accuracy: K 0 {a:.3g} vs K 1 {b:.3g} (K 0 {'ahead' if m else 'not ahead'} beyond the seeds' "
            f"spread; K 0 higher in {w}/{n} seeds)",
            f"held-out accuracy at steps {', '.join(map(str, steps[:-1]))}: K 0 ahead beyond the spread at "
            f"{', '.join(map(str, ahead)) or 'none'}",
            f"every K 1 batch generated by the previous step's weights (lag 1 from step 2 on, 0 at step 1): {exact}"]

    return [Experiment(
        "One-step off-policy rollout: accuracy per step",
        "verl's one-step-off-policy trainer, AReaL's decoupled PPO: generating batch k+1 with theta_k while the update "
        "on batch k runs, with the decoupled loss, learns as fast per step as the synchronous loop.",
        # the real model: its engine generates from the policy itself (a bf16 copy is refused with --rollout-lag)
        common(task) + (["--rollout-dtype", "auto", "--max-steps", "30"] if sm else
                        ["--max-steps", "30", "--eval-every", "5", "--eval-samples", "0"]),
        {sync: [], lag: ["--rollout-lag", "1"]}, check,
        [("greedy acc", final("eval/accuracy")), ("TIS ESS", over_run("policy/tis_ess")),
         ("TIS capped", over_run("policy/tis_capped_frac")), ("logp gap prox-behav", over_run("policy/engine_logp_gap"))],
        [("held-out accuracy", "eval:eval/accuracy"), ("train accuracy", "rollout/accuracy"),
         ("response length", "rollout/response_length")],
        note=(f"{ON_SMOLLM2[task]}, 8 prompts x 8, lr 1e-5, plain GRPO; K 1 weights each token by min(pi_prox / "
              "pi_behav, 2). Both generate from the fp32 policy (the bf16 rollout copy is refused with --rollout-lag). "
              "One run at a time with 2 threads: the producer thread shares them, so the wall times say nothing about "
              "the overlap.") if sm else
             "GRPO defaults at 128 responses per step; K 1 weights each token by min(pi_prox / pi_behav, 2). The speed "
             "of K 1 is bench/async_rollout.py's (docs/speed.md): here two runs share the two cores, so a producer "
             "thread has no core of its own and the wall times say nothing about the overlap." + (
                 f" {ON_COUNTDOWN}: three times the math task's lr, so one step of staleness moves the policy more."
                 if cd else ""))]


def offpolicy_losses_experiments(task="math"):
    """DAPO's token clip vs GSPO's sequence clip vs CISPO's weight cap, off-policy: mu = 16, then also one step stale
    (on Countdown and SmolLM2 the synchronous experiment alone, for the time the stale one's runs would add)."""
    cd, sm = task == "countdown", task.startswith("smollm2")
    dapo_, gspo_, cispo_ = "DAPO token clip 0.2/0.28", "GSPO sequence clip 3e-4/4e-4", "CISPO weight cap 5"
    cispo_lr = f"CISPO weight cap 5, lr {'7.5e-5' if cd else '2.5e-5'}"
    variants = {dapo_: ["--algorithm", "dapo", "--clip-low", "0.2", "--clip-high", "0.28", "--loss-agg", "token-mean"],
                gspo_: ["--algorithm", "gspo", "--clip-low", "3e-4", "--clip-high", "4e-4", "--loss-agg", "seq-mean-token-mean"],
                cispo_: ["--algorithm", "cispo", "--clip-low", "1.0", "--clip-high", "4.0", "--loss-agg", "token-mean"],
                # added after the first runs (CISPO at the shared lr 1e-4 collapsed): the cispo recipe's lr, outside the
                # verdict, which stays the one declared before the runs
                cispo_lr: ["--algorithm", "cispo", "--clip-low", "1.0", "--clip-high", "4.0", "--loss-agg", "token-mean",
                           "--lr", "7.5e-5" if cd else "2.5e-5"]}
    clipped = lambda r: over_run("policy/clip_frac_low")(r) + over_run("policy/clip_frac_high")(r)  # noqa: E731

    def updating(r: Run):  # steps with a group of mixed outcomes: the only ones with a gradient
        return [m for m in r.metrics if m["rollout/frac_zero_std"] < 1]

    def clip_share(m):  # one step's share of tokens clipped, either side
        return m["policy/clip_frac_low"] + m["policy/clip_frac_high"]

    def clipped_updating(r: Run):
        ms = updating(r)
        return statistics.mean(map(clip_share, ms)) if ms else float("nan")

    def spikes(r: Run):  # steps whose grad norm exceeds 3x the run's median
        g = [m["perf/grad_norm"] for m in r.metrics if "perf/grad_norm" in m]
        return float(sum(x > 3 * statistics.median(g) for x in g)) if g else float("nan")

    def check(exp, runs):
        acc = final("eval/accuracy")
        cispo_acc, gspo_acc = compare(exp, cispo_, dapo_, acc), compare(exp, gspo_, dapo_, acc)
        more = compare(exp, gspo_, dapo_, clipped)
        steadier = [compare(exp, v, dapo_, spikes, higher=False) for v in (gspo_, cispo_)]
        return verdict_of([cispo_acc, gspo_acc, more]), [
            line("final greedy accuracy, CISPO vs DAPO (MiniMax-M1 Fig. 2)", cispo_acc),
            line("final greedy accuracy, GSPO vs DAPO (GSPO Sec. 5)", gspo_acc),
            line("share of tokens clipped, GSPO vs DAPO (GSPO Sec. 5.2: about 100x more)", more, "{:.3g}"),
            line("grad-norm spikes (> 3x the run's median), GSPO vs DAPO (fewer = steadier; not in the verdict)", steadier[0]),
            line("grad-norm spikes, CISPO vs DAPO (not in the verdict)", steadier[1])] + ([] if not sm else [
            # added after seed 2's GSPO run had a gradient on 1 step of 30 (every other step's groups had one outcome:
            # advantages 0, so no clip binds): the share over the steps with a gradient
            line("share of tokens clipped over the steps with a gradient, GSPO vs DAPO (not in the verdict)",
                 compare(exp, gspo_, dapo_, clipped_updating), "{:.3g}")]) + ([] if cispo_lr not in runs else [
            line(f"final greedy accuracy, CISPO at the cispo recipe's lr {cispo_lr.split()[-1]} vs DAPO at "
                 f"{'3e-4' if cd else '1e-4'} (not in the verdict)", compare(exp, cispo_lr, dapo_, acc))])

    claim = ("MiniMax-M1 Sec. 3.1 (Fig. 2): with many off-policy updates per rollout, CISPO, which keeps every token's "
             "gradient under a capped weight, learns faster than DAPO's token clip. GSPO Sec. 5 (Sec. 5.1-5.2): the "
             "sequence clip learns faster and more stably than the token clip, though it clips about two orders of "
             "magnitude more tokens.")
    table = [("greedy acc", final("eval/accuracy")), ("entropy, last 5", last("policy/entropy", 5)),
             ("clipped tokens", clipped), ("clipped responses (GSPO)", over_run("policy/seq_clip_frac_high")),
             ("capped tokens (CISPO)", over_run("policy/capped_frac_high")), ("grad-norm spikes", spikes),
             ("grad norm, max", lambda r: max(m["perf/grad_norm"] for m in r.metrics))]
    plots = [("held-out greedy accuracy", "eval:eval/accuracy"), ("token entropy", "policy/entropy"),
             ("clipped share of tokens", lambda r: ([m["step"] for m in r.metrics], [clip_share(m) for m in r.metrics])),
             ("grad norm", "perf/grad_norm")]
    base = COMMON + ["--mini-batch-size", "16", "--epochs", "2", "--max-steps", "30", "--eval-every", "5", "--eval-samples", "0"]
    note = ("mu = 16: 2 passes over 8 mini-batches of 16 of the 128 responses (DAPO's and the cispo recipe's 16 updates "
            "per rollout; one pass of mini-batches of 8 would hold one prompt's group each). The first three variants differ "
            "in the loss alone (--algorithm, eps, aggregation), with no dynamic sampling, overlong shaping or KL. With "
            "--rollout-lag 1 the clip acts on pi_theta / pi_prox and each token is weighted by min(pi_prox / pi_behav, 2). "
            "All variants but the last share lr 1e-4. CISPO has no trust region (its capped weight multiplies every "
            "token's gradient), and at 1e-4 its entropy rose and its accuracy fell, so the last variant runs it at the "
            "cispo recipe's lr 2.5e-5 (added after the first three had run; the verdict is the declared check on the "
            "first three).")
    if sm:  # the three losses at the real model's lr; the cispo recipe's lower lr is not a variant here
        del variants[cispo_lr]
        table.insert(1, ("steps with a gradient", lambda r: float(len(updating(r)))))
        base = common(task) + ["--mini-batch-size", "8", "--epochs", "2", "--max-steps", "30"]
        note = (f"{ON_SMOLLM2[task]}, 8 prompts x 8, lr 1e-5 for all three. mu = 16: 2 passes over 8 mini-batches "
                "of 8 of the 64 responses (one prompt's group each). The variants differ in the loss alone, with no "
                "dynamic sampling, overlong shaping or KL.")
        # the stale experiment left out (as on Countdown), declared before any of these runs; the note says why
        note += (" The math form's one-step-stale experiment is left out: its 6 more runs would add ~2 h on 2 cores, and "
                 "one step of staleness on this model is the async reproduction's experiment.")
        return [Experiment("Off-policy losses at mu = 16", claim, base, variants, check, table, plots, note=note)]
    if cd:
        base = common(task) + base[len(COMMON):]
        note = ("mu = 16 as in the math form (2 passes over 8 mini-batches of 16 of the 128 responses); the first three "
                "variants differ in the loss alone, with no dynamic sampling, overlong shaping or KL, at the Countdown lr "
                "3e-4; the fourth is CISPO at the cispo recipe's Countdown lr 7.5e-5 (2.5e-5 x 3), declared before these "
                "runs because CISPO collapsed at the shared lr on the math task (outside the verdict, as there). "
                f"{ON_COUNTDOWN}. The math form's one-step-stale experiment is left out: its 12 more runs would pass the "
                "30 minutes.")
        return [Experiment("Off-policy losses at mu = 16", claim, base, variants, check, table, plots, note=note)]
    return [Experiment("Off-policy losses at mu = 16", claim, base, variants, check, table, plots, note=note),
            Experiment("Off-policy losses at mu = 16, one step stale (--rollout-lag 1)", claim,
                       base + ["--rollout-lag", "1"], variants, check, table, plots, note=note)]


PAPERS = {"dapo": dapo_experiments, "entropy": entropy_experiments, "skywork": skywork_experiments,
          "ringlite": ringlite_experiments, "ringlite-stages": ringlite_stages_experiments, "mimo": mimo_experiments,
          "mimo-code": mimo_code_experiments, "compass": compass_experiments, "async": async_experiments,
          "offpolicy-losses": offpolicy_losses_experiments}


# ------------------------------------------------------------------------------------------------
# Running
def slug(s: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in s.lower()).strip("-").replace("--", "-")


def train_argv(exp, variant, seed, out, smoke, scale=1, threads=None, checkpoints=True):
    argv = exp.base + exp.variants[variant] + ["--seed", str(seed), "--output-dir", os.path.relpath(out, ROOT)]
    if not checkpoints:  # runs a time limit will stop are never resumed: a checkpoint at the end only
        argv += ["--save-every", "0"]
    if scale != 1:  # --scale K: K times the steps (the last --max-steps is the one train.py reads)
        k = len(argv) - 1 - argv[::-1].index("--max-steps")
        argv[k + 1] = str(int(argv[k + 1]) * scale)
    if threads:
        argv += ["--threads", str(threads)]
    if smoke:
        argv += ["--max-steps", "2", "--eval-every", "0", "--eval-problems", "8", "--eval-samples", "0"]
        if any("steps=" in a for a in argv):  # stages with their own step counts: one step each, two stages
            argv += ["--stages", "data=builtin-math reward=math steps=1; data=builtin-code reward=code max_new_tokens=96 "
                                 "eval_problems=4 steps=1"]
    return argv


# flags that change how a run is carried out, not what it computes: a run made with other values is the same run
HOW = ("--threads", "--save-every")


def what(argv) -> list:
    """A run's arguments without HOW's flags and their values."""
    return [a for k, a in enumerate(argv) if a not in HOW and (k == 0 or argv[k - 1] not in HOW)]


def run_one(argv, out, resume=False, deadline=None):
    """train.py in a subprocess; reused when `out` holds a finished run with the same arguments (HOW's aside). An
    unfinished run with the same arguments continues from its last checkpoint when `resume` (train.py --resume auto),
    else starts again from nothing. At `deadline` (time.time()) a run still going is stopped as Ctrl-C stops it, and
    a run that fails under a deadline is kept as it ended: both return None (the report compares them where they
    stopped); without a deadline a failure is one error line, except where dynamic sampling ran dry (the filter found
    too few mixed groups in --max-gen-rounds rounds: the model solves nearly every prompt drawn, an end verl's DAPO
    trainer also raises): that run is kept as it ended, returns None, and is reused, not resumed into the same end."""
    done, meta = os.path.join(out, "summary.json"), os.path.join(out, "run.json")
    same = os.path.exists(meta) and what(json.load(open(meta))["argv"]) == what(argv)
    if same and (os.path.exists(done) or ran_dry(out)):  # a run that ran dry would end there again
        return 0.0
    carry_on = resume and same  # else from nothing, and the earlier sittings' seconds do not count
    earlier = json.load(open(meta)).get("wall_s", 0.0) if carry_on else 0.0

    def record(**kw):  # how long it took, how busy the machine was when it ended, where it ran
        with open(meta + ".tmp", "w") as f:
            json.dump({"argv": argv, "wall_s": earlier + time.time() - t0, "load_avg_1min": os.getloadavg()[0],
                       "machine": machine(), **kw}, f)
        os.replace(meta + ".tmp", meta)  # whole or not at all: a sitting killed mid-write leaves the last record

    if not carry_on:
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
    t0 = time.time()
    record()
    with open(os.path.join(out, "train.log"), "a") as log:
        p = subprocess.Popen([sys.executable, os.path.join(ROOT, "train.py"), *argv]
                             + (["--resume", "auto"] if carry_on else []), cwd=ROOT, stdout=log,
                             stderr=subprocess.STDOUT, env={**os.environ, "TQDM_DISABLE": "1"})
        try:
            while True:  # recorded each minute, so a sitting that is killed or Ctrl-C'd still counts when resumed
                try:
                    rc = p.wait(timeout=60 if deadline is None else min(60, max(1.0, deadline - time.time())))
                    break
                except subprocess.TimeoutExpired:
                    record()
                    if deadline is not None and time.time() >= deadline:
                        raise
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGINT)
            p.wait()
            if not os.path.exists(done):  # else it finished as the signal came
                record(stopped=True)
                return None
            rc = 0
    if rc != 0:
        record(failed=rc)
        if deadline is None and not ran_dry(out):
            raise SystemExit(f"error: train.py failed (exit {rc}) in {out}; its output: {os.path.join(out, 'train.log')}")
    else:
        record()
    if resume or deadline is not None:  # the real model's checkpoints (1.6 GB each) are only for resuming
        for d in os.listdir(out):
            if d.startswith("checkpoint"):
                shutil.rmtree(os.path.join(out, d), ignore_errors=True)
    return None if rc else earlier + time.time() - t0


def load_run(out, upto=None) -> Run:
    """A run's records; `upto`: a run stopped at a time limit, read up to that step (its evaluation there is `after`)."""
    read = lambda name: [json.loads(x) for x in open(os.path.join(out, name))]  # noqa: E731
    metrics, evals = read("metrics.jsonl"), read("evals.jsonl")
    if upto is None:
        return Run(out, metrics, evals, json.load(open(os.path.join(out, "summary.json"))))
    evals = [e for e in evals if e["step"] <= upto]
    return Run(out, [m for m in metrics if m["step"] <= upto], evals, {"before": evals[0], "after": evals[-1]})


def why_ended(out) -> str:
    """Why a run has no summary: the time limit (run.json says stopped), else train.py's error line, else the last
    line of its output."""
    meta = os.path.join(out, "run.json")
    if os.path.exists(meta) and json.load(open(meta)).get("stopped"):
        return "stopped at the time limit"
    log = os.path.join(out, "train.log")
    lines = [x.strip() for x in open(log, errors="replace") if x.strip()] if os.path.exists(log) else []
    errors = [x for x in lines if x.startswith("error:")]
    return errors[-1] if errors else (lines[-1] if lines else "no output")


def ran_dry(out) -> bool:
    """Whether a run ended as train.py ends when dynamic sampling (or the seamless rollout) runs out of rounds."""
    return any(f": {who}: only " in why_ended(out) for who in ("dynamic sampling", "seamless rollout"))


def last_eval_step(out) -> int:
    """The step of a run's last evaluation (a run stopped at a time limit)."""
    steps = [json.loads(x)["step"] for x in open(os.path.join(out, "evals.jsonl"))] if os.path.exists(
        os.path.join(out, "evals.jsonl")) else []
    return max(steps, default=0)


def experiments(paper, task="math"):
    """`paper`'s experiments on `task` (ringlite-stages and mimo-code have the math form alone)."""
    return PAPERS[paper](task) if task != "math" else PAPERS[paper]()


def report_name(paper, task="math", scale=1):
    """docs/reproduce_NAME.md and .png of `paper` on `task` (x K: --scale K)."""
    return (paper if task == "math" else f"{paper}_{task}") + (f"_x{scale}" if scale != 1 else "")


def shell(flags) -> str:
    """train.py flags as typed (an empty value quoted)."""
    return " ".join(a if a else repr(a) for a in flags)


def task_root(root, task, scale=1):
    """Where a task's runs go: under `root` (default runs/reproduce), the real model's in SMOLLM2_RUNS; -xK: --scale K."""
    x = f"-x{scale}" if scale != 1 else ""
    if task.startswith("smollm2") and root is None:
        return SMOLLM2_RUNS + task[len("smollm2"):] + x  # reproduce, reproduce-easy, reproduce-short, reproduce-worked
    root = root or os.path.join(ROOT, "runs", "reproduce")
    return root if task == "math" and not x else os.path.join(root, task + x)


def run_paper(paper, seeds, workers, root, smoke, task="math", scale=1, deadline=None, train=True):
    """Every run of `paper` (seed by seed: a command cut short has whole seeds done); -> (experiments with their
    runs, (minutes over the workers, the highest load, workers, {experiment: the step its runs are read to} where
    some ended early, machine, the runs that ended early))."""
    exps = experiments(paper, task)
    real = task.startswith("smollm2")  # the real model: 2 threads a run on 2 cores, resumable runs kept as data
    root = task_root(root, task, scale)
    jobs = [(e, v, s, os.path.join(root, paper, slug(e.shared.get(v, e.name))[:40], slug(v), f"seed{s}"))
            for s in seeds for e in exps for v in e.variants]
    t0, n = time.time(), len(jobs)
    threads = max(1, min(2, (os.cpu_count() or 1) // workers)) if real else None
    first = {}  # run directory -> the job that runs it (a shared variant's other jobs read it)
    for k, (e, v, s, out) in enumerate(jobs):
        runs_it = jobs[first.setdefault(out, k)]
        if what(train_argv(e, v, s, out, smoke, scale)) != what(train_argv(*runs_it, smoke, scale)):
            raise SystemExit(f"error: [{paper}] {e.name} shares '{v}' with {e.shared[v]}, but its flags differ")
    print(f"[{paper}] {n} runs ({len(exps)} experiment(s), {len(seeds)} seed(s)), {workers} at a time", flush=True)

    def go(k_job):
        k, (e, v, s, out) = k_job
        if first[out] != k:
            return 0.0
        if not train:  # --report-only: the runs as they are (brought from the machine that ran them)
            if not os.path.exists(os.path.join(out, "run.json")):
                raise SystemExit(f"error: --report-only: {out} holds no run")
            return 0.0
        dt = run_one(train_argv(e, v, s, out, smoke, scale, threads, checkpoints=deadline is None), out,
                     resume=real and deadline is None, deadline=deadline)
        print(f"[{paper}] {k + 1}/{n} {e.name} | {v} | seed {s}: "
              f"{why_ended(out) if dt is None else 'reused' if not dt else f'{dt:.0f}s'} "
              f"({time.time() - t0:.0f}s elapsed)", flush=True)
        return dt

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(go, enumerate(jobs)))
    metas = [json.load(open(os.path.join(out, "run.json"))) for out in first]
    # some runs ended early (a time limit, dynamic sampling run dry, or an error brought from another machine:
    # --report-only): an experiment with such a run reads all its runs up to the last evaluated step all of them reached
    ended = {out: why_ended(out) for *_, out in jobs if not os.path.exists(os.path.join(out, "summary.json"))}
    early = [(v, s, ended[out]) for k, (e, v, s, out) in enumerate(jobs) if out in ended and first[out] == k]
    upto = {e.name: min(last_eval_step(out) for e2, *_, out in jobs if e2 is e) for e in exps
            if any(e2 is e and out in ended for e2, *_, out in jobs)}  # experiment -> the step its runs are read to
    if 0 in upto.values():
        raise SystemExit(f"error: [{paper}] a run ended before its first evaluation after step 0 ("
                         f"{'; '.join(sorted({w for *_, w in early}))}): nothing to compare (a longer --stop-after, or "
                         "more --workers so that every run starts)")
    # the command's cost: the runs' total seconds over the workers (a run reused from an interrupted command counts
    # what it took then), and the busiest the machine was when a run ended
    wall = (sum(m["wall_s"] for m in metas) / workers, max(m.get("load_avg_1min", 0.0) for m in metas), workers, upto,
            " and ".join(sorted({m.get("machine", machine()) for m in metas})), early)
    for e in exps:
        e.runs = {v: [load_run(out, upto.get(e.name)) for e2, v2, _, out in jobs if e2 is e and v2 == v]
                  for v in e.variants}
        e.early = e.name in upto
    return exps, wall


# ------------------------------------------------------------------------------------------------
# Reporting
def series(run: Run, spec):
    if callable(spec):
        out = spec(run)
        return out if isinstance(out, tuple) else ([m["step"] for m in run.metrics], out)
    if spec.startswith("eval:"):
        key = spec[5:]
        return [e["step"] for e in run.evals], [e.get(key, float("nan")) for e in run.evals]
    return [m["step"] for m in run.metrics], [m.get(spec, float("nan")) for m in run.metrics]


def plot(exps, path, command):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = max(len(e.plots) for e in exps)
    fig, axes = plt.subplots(len(exps), cols, figsize=(4.2 * cols, 3.4 * len(exps)), squeeze=False)
    for row, e in zip(axes, exps):
        for ax, (title, spec) in zip(row, e.plots):
            for v, runs in e.runs.items():
                curves = [series(r, spec) for r in runs]
                steps = curves[0][0]
                n = min(len(c[1]) for c in curves)
                vals = [[c[1][i] for c in curves] for i in range(n)]
                mean = [statistics.mean(x) for x in vals]
                line_, = ax.plot(steps[:n], mean, label=v)
                ax.fill_between(steps[:n], [min(x) for x in vals], [max(x) for x in vals], alpha=0.2, color=line_.get_color())
            ax.set_title(title, fontsize=9)
            ax.set_xlabel("step", fontsize=8)
        row[0].legend(fontsize=7)
        row[0].set_ylabel(e.name[:38], fontsize=8)
        for ax in row[len(e.plots):]:
            ax.axis("off")
    seeds = len(next(iter(exps[0].runs.values())))
    fig.suptitle(f"{command}   (mean of {seeds} seeds; band: min..max)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def machine() -> str:
    """Where the runs ran: the GPU train.py used, else this machine's cores."""
    import torch

    return f"one {torch.cuda.get_device_name(0)} ({os.cpu_count()} cores)" if torch.cuda.is_available() else \
        f"a {os.cpu_count()}-core CPU"


def kind_of(m: dict) -> str:
    """A run's machine (config.json "machine", runs.machine()) as far as its numbers depend on it: the GPU, else the
    CPU (its make: an Intel and an AMD CPU, the same instructions, gave 0.125 and 0.109 at dapo's step 0), its
    bf16 instructions (AMX tiles, avx512_bf16, none: bf16 matmuls round differently on each) and torch's kernels."""
    from runs import bf16_support

    if m.get("gpu"):
        return m["gpu"]
    cpu = m.get("cpu") or "CPU"
    bf16 = {"amx": "AMX", "avx512_bf16": "avx512_bf16 without AMX", "none": "no bf16 instructions"}
    return (f"{'an' if cpu[0] in 'AEIOU' else 'a'} {cpu} with {bf16[bf16_support(m.get('isa', []))]} "
            f"({m.get('kernels', '?')} kernels)")


def machines_line(e) -> str:
    """'' when an experiment's runs all ran on one kind of machine; else which seeds ran on which, and the held-out
    greedy accuracy at step 0 on each (the same weights and prompts: what the machine alone changes)."""
    where, acc0 = {}, {}  # machine kind -> {seed: [variants run there]}; kind -> the step-0 accuracies there
    for v, runs in e.runs.items():
        for r in runs:
            path = os.path.join(r.dir, "config.json")
            if not os.path.exists(path):
                continue
            cfg = json.load(open(path))
            k = kind_of(cfg.get("machine", {}))
            where.setdefault(k, {}).setdefault(cfg["seed"], []).append(v)
            if r.evals and r.evals[0]["step"] == 0:
                acc0.setdefault(k, set()).add(round(r.evals[0]["eval/accuracy"], 3))
    if len(where) < 2:
        return ""

    def who(seeds):  # "seeds 0, 1" where all of a seed's variants ran there, else "'variant' seeds ..."
        ss = lambda xs: f"seed{'s' if len(xs) > 1 else ''} {', '.join(map(str, xs))}"  # noqa: E731
        whole, part = [], {}
        for s, vs in sorted(seeds.items()):
            if len(vs) == len(e.runs):
                whole.append(s)
            for v in vs if len(vs) < len(e.runs) else ():
                part.setdefault(v, []).append(s)
        return ", ".join(([ss(whole)] if whole else []) + [f"'{v}' {ss(xs)}" for v, xs in part.items()])

    return ("Machines (each run's config.json `machine`; after each, the held-out greedy accuracy at step 0 there, the "
            "same weights and prompts): " + "; ".join(f"{who(seeds)} on {k}: " + " / ".join(
                f"{a:.3g}" for a in sorted(acc0.get(k, ()))) for k, seeds in where.items()) + ".")


def fewer_seeds(seeds, wall):
    """Where a command ran fewer than the default 3 seeds, why: its minutes per seed (the header's figure, the runs'
    total over the workers, over the seeds) and what 3 would take."""
    if len(seeds) >= 3:
        return ""
    per = wall[0] / 60 / len(seeds)
    return f" ({len(seeds)}, not 3, for the cost: a seed's runs take ~{per:.0f} min here, 3 seeds ~{3 * per:.0f})"


def report(paper, exps, seeds, wall, command, write_docs, task="math", scale=1, where=None):
    name = report_name(paper, task, scale)
    on = {"math": "", "countdown": " on Countdown", "smollm2": " on SmolLM2-135M-Instruct",
          "smollm2-easy": " on SmolLM2-135M-Instruct, the easy task",
          "smollm2-short": " on SmolLM2-135M-Instruct at 16 tokens",
          "smollm2-worked": " on SmolLM2-135M-Instruct, the working asked for"}[task]
    md = [f"# Reproduction: {paper}{on}" + (f", {scale}x the steps" if scale != 1 else ""), "",
          f"Command: `{command}` (~{wall[0] / 60:.1f} min on {wall[4]}: the "
          f"runs' total time over {wall[2]} worker{'s' if wall[2] > 1 else ''}, load average up to {wall[1]:.1f} while they ran; seeds "
          f"{', '.join(map(str, seeds))}{fewer_seeds(seeds, wall)}; runs in `{where}`).", ""]
    if wall[3]:
        whys = sorted({why for *_, why in wall[5]})
        read = (f"The table reads every run up to step {next(iter(wall[3].values()))}" if len(exps) == 1 else
                "The table of " + " and of ".join(f"'{name}' reads its runs up to step {k}" for name, k in wall[3].items()))
        md += [f"**Runs that ended early** ({len(wall[5])} of {sum(len(r) for e in exps for r in e.runs.values())}): "
               + "; ".join(f"{' / '.join(f'{v} seed {s}' for v, s, w in wall[5] if w == why)}: {why}" for why in whys)
               + f". {read}, the last evaluated step all of them reached; each "
               "check compares its two variants at the last evaluated step both reached (the step it names).", ""]
    md += [f"![{name}](reproduce_{name}.png)", ""]
    verdicts = []
    for e in exps:
        verdict, checks = e.check(e, e.runs)
        verdicts.append((e.name, verdict))
        md += [f"## {e.name}", "", f"**Claim.** {e.claim}", "", f"**Verdict: {verdict}.**", ""]
        md += [f"- {c}" for c in checks] + [""]
        md += ["| variant | " + " | ".join(t for t, _ in e.table) + " |", "|---" * (len(e.table) + 1) + "|"]
        for v, runs in e.runs.items():
            md.append(f"| {v} | " + " | ".join(mean_sd([fn(r) for r in runs]) for _, fn in e.table) + " |")
        md += ["", "Per seed (" + e.table[0][0] + "): " + "; ".join(
            f"{v}: " + ", ".join(f"{e.table[0][1](r):.3g}" for r in runs) for v, runs in e.runs.items()), ""]
        md += [f"Settings: `python train.py {shell(e.base)}` + per variant: "
               + "; ".join(f"{v}: `{shell(flags) or '(nothing)'}`" if len(' '.join(flags)) < 120
                           else f"{v}: `{' '.join(flags)[:110]}...`" for v, flags in e.variants.items()) + ".", ""]
        if e.note:
            md += [e.note, ""]
        where_ran = machines_line(e)
        if where_ran:
            md += [where_ran, ""]
    text = "\n".join(md)
    print(text)
    if write_docs:
        docs = os.path.join(ROOT, "docs")
        os.makedirs(docs, exist_ok=True)
        with open(os.path.join(docs, f"reproduce_{name}.md"), "w") as f:
            f.write(text)
        plot(exps, os.path.join(docs, f"reproduce_{name}.png"), command)
        print(f"wrote docs/reproduce_{name}.md and docs/reproduce_{name}.png")
    return verdicts


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paper", choices=list(PAPERS) + ["all"])
    ap.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (default: 0,1,2)")
    ap.add_argument("--workers", type=int, default=None, help="train.py runs at a time (default: 2, one per core; "
                    "--task smollm2: 1, with 2 threads)")
    ap.add_argument("--out", default=None, help="where the runs go (default runs/reproduce; --task smollm2: "
                                                "docs/smollm2_runs/reproduce, kept as data)")
    ap.add_argument("--smoke", action="store_true", help="2 steps, the first seed only, nothing written to docs/")
    ap.add_argument("--task", choices=TASKS, default="math", help="the task the runs train on (countdown: every paper "
                    f"but {' and '.join(NO_COUNTDOWN)}; smollm2, smollm2-easy: the real model, every paper but "
                    f"{' and '.join(NO_SMOLLM2)}; smollm2-short, smollm2-worked: the real model at 16 tokens / with the "
                    "working asked for, dapo; reports "
                    "docs/reproduce_PAPER_TASK.md)")
    ap.add_argument("--scale", type=int, default=1, help="K times each run's steps (a GPU's runs; reports "
                                                         "docs/reproduce_PAPER_TASK_xK.md)")
    ap.add_argument("--report-only", action="store_true", help="train nothing: the report of the runs as they are "
                                                                   "(runs made on another machine)")
    ap.add_argument("--stop-after", type=float, default=None, metavar="MINUTES", help="stop runs still going after "
                    "MINUTES and compare every run at the last evaluated step all reached (a leased machine's time)")
    a = ap.parse_args(argv)
    try:
        seeds = [int(s) for s in a.seeds.split(",")]
    except ValueError:
        raise SystemExit(f"error: --seeds: {a.seeds!r} is not a comma-separated list of integers") from None
    if a.smoke:
        seeds = seeds[:1]
    if a.scale < 1 or (a.stop_after is not None and not a.stop_after > 0) or (a.workers is not None and a.workers < 1):
        raise SystemExit(f"error: --scale {a.scale} / --stop-after {a.stop_after} / --workers {a.workers}: a positive "
                         "number is needed")
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:  # started in the background by a shell: the runs inherit
        signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C's handling (exec resets it to the default)
    papers = list(PAPERS) if a.paper == "all" else [a.paper]
    if a.task != "math":
        has = COUNTDOWN_PAPERS if a.task == "countdown" else SHORT_PAPERS if a.task in NO_SHORT else SMOLLM2_PAPERS
        if a.paper != "all" and a.paper not in has:
            why = f"no Countdown form: {NO_COUNTDOWN[a.paper]}" if a.task == "countdown" else \
                "no form {}: {}".format(*NO_SHORT[a.task]) if a.task in NO_SHORT else \
                f"no SmolLM2 form: {NO_SMOLLM2[a.paper]}"
            raise SystemExit(f"error: --task {a.task}: {a.paper} has {why} (those that have one: {', '.join(has)})")
        papers = [p for p in papers if p in has]
    workers = max(1, a.workers or (1 if a.task.startswith("smollm2") else 2))
    if a.smoke and a.out is None:  # a smoke run is no data: never in docs/smollm2_runs/
        a.out = os.path.join(ROOT, "runs", "reproduce")
    deadline = None if a.stop_after is None else time.time() + 60 * a.stop_after
    from runs import bf16_warning

    if a.task.startswith("smollm2") and not a.report_only and (warning := bf16_warning("--task smollm2's bf16 flags")):
        print(f"{warning}; a run of 30 steps takes hours here, not docs/reproductions.md's minutes", file=sys.stderr,
              flush=True)
    out = {}
    for paper in papers:
        exps, wall = run_paper(paper, seeds, workers, a.out, a.smoke, a.task, a.scale, deadline, not a.report_only)
        command = f"python bench/reproduce.py {paper}" + (f" --seeds {a.seeds}" if a.seeds != "0,1,2" else "") + (
            f" --task {a.task}" if a.task != "math" else "") + (f" --scale {a.scale}" if a.scale != 1 else "") + (
            f" --workers {a.workers}" if a.workers else "") + (
            f" --stop-after {a.stop_after:g}" if a.stop_after is not None else "")
        where = os.path.relpath(os.path.join(task_root(a.out, a.task, a.scale), paper), ROOT) + "/"
        out[paper] = report(paper, exps, seeds, wall, command, write_docs=not a.smoke, task=a.task, scale=a.scale,
                            where=where)
    return out


if __name__ == "__main__":
    sys.path.insert(0, ROOT)
    from tools.cli import cli  # bad input: one line and exit 2

    sys.exit(cli(main))
