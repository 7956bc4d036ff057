"""Offline difficulty grading and filtering of training data, as the papers do it.

    python -m tools.grade --data builtin --n 300 --samples 8 --out graded.jsonl            # grade (tiny model)
    python -m tools.grade grade --data train.parquet --model Qwen/Qwen2.5-Math-7B --samples 16 --out graded.parquet \
        --max-new-tokens 4096 --filter skywork                                        # grade, keep 1..15 of 16
    python -m tools.grade filter --data graded.jsonl --rule mimo --out kept.jsonl           # filter, no regrading
    python train.py --train-data kept.jsonl --recipe compass                          # train on it
    python -m tools.grade --data builtin-code --n 100 --samples 8 --max-new-tokens 96 --out graded.jsonl   # code
    python -m tools.grade --data problems.jsonl --reward code --samples 16 --out graded.jsonl --model M     # a code file
    python train.py --train-data graded.jsonl --reward code --recipe compass          # train on graded code

Grading: N completions per problem (temperature 1.0) from the policy to be trained, with the project's own rollout
engine (rollout.py) and reward (reward.py, math-verify), reading each response as training does: a thinking model's
answer after its thought (reward.py; coding/code_reward.py for programs), with the prompt's own <think> put in front when the template opens the thought
(`--template`, `--system-prompt` and `--chat-template-kwargs` as train.py's). Each output row is the input row in the `plain` schema
(prompt, answer, the original extra fields) plus
    pass_rate    c / N, c correct completions out of N (a verifier timeout counts as wrong)
    num_samples  N
    difficulty   level 1-5 by pass-rate percentile: 1 = easiest, 5 = hardest (Compass-Thinker Sec. 3, Big-Math style)
so that tasks/load.py reads it back with `level` = difficulty and `pass_rate` set (the curriculum samples by it).

Code problems (`--reward code`, implied by `--data builtin-code`): a completion is correct when its program passes
every test (coding/code_reward.py, mode all_or_nothing), as Ring-lite and Skywork-OR1 grade code, so the pass rate is
the share of samples that pass all tests; MiMo's partial-credit scores are a training reward, not used here. Prompts
are the code ones (tasks.templates.build_prompt kind "code"), `--model` empty is the tiny math+code model
(tiny.CODE_RECIPE) and `--max-new-tokens` defaults to 96. The input is the built-in code task ('builtin-code') or a
JSONL file in the code schema (coding/code_reward.py); each output row is the input row as read (question, tests or
input_output, fn_name, id, ...; for the built-in task its problem dict plus `level`, the task's own level) plus the
three fields above, in JSONL, which coding/problems.py (train.py --reward code) reads back with `level` =
difficulty. Its time and its agreement with the task's own levels on the built-in code task: docs/internals.md.

Levels, precisely. Sort the n problems easiest first (highest pass rate first); problem i (0-based) occupies the
unit interval [i, i + 1) of [0, n), and a block of T tied problems, E of them strictly easier, occupies [E, E + T).
Each problem gets the level of the centre of its block:
    level = 1 + floor(5 * (E + T / 2) / n).
Without ties (T = 1) this is five equal-count buckets (sizes differ by at most one); tied problems share one level,
the bucket holding the middle of their block, so with heavy ties (8 samples give only 9 distinct pass rates) some
levels can be over-full, under-full or empty. A set with a single pass rate (say all-wrong) is all level 3: no
information, the middle. Lower pass rate never means a lower level.

Filters (`--filter` on `grade`, `--rule` on `filter`; the table of all three is printed either way):
    skywork   keep 1..N-1 correct of N    Skywork-OR1 Sec. 3.4 (its code: model_difficulty in [1, 15] of 16)
    ringlite  drop all-correct and all-wrong  Ring-lite Sec. 4.3 (with one grading model this is skywork's rule;
              the paper's all-wrong test uses a second model, DeepSeek-R1, too)
    mimo      keep pass rate <= 0.9       MiMo Sec. 3.2 (all-wrong problems are kept; MiMo's earlier filter,
              "solved by a strong reasoning model", is not reproduced)
Levels are those of the whole graded set; `--relevel` recomputes them among the kept problems.

Resumable: graded problems are appended to a sidecar OUT + '.partial.jsonl' (a header with the settings, then one
line per problem: index, hash of prompt and answer, num_correct, num_samples, pass_rate), flushed after every batch of
`--batch-prompts` problems. A rerun with the same settings skips what is there; a changed input or settings is an
error. The sidecar is removed once OUT is written (atomically: temp file + rename). Deterministic: before batch b, the
torch and Python RNGs are seeded from (seed, b), so a resumed run writes what an uninterrupted one writes (HF engine;
vLLM samples from its own seeded generator, so with --rollout vllm a resumed run is not bit-identical).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import sys
from dataclasses import dataclass

import torch

import data
from coding.problems import load_code_dataset
from data import DataError
from engines.stops import read_stops
from rollout import SamplingParams
from tasks.load import load_dataset
from tasks.templates import TEMPLATES, build_prompt, check_template, opens_thought, parse_template_kwargs
from tools.cli import cli, set_threads

GRADE_FIELDS = ("pass_rate", "num_samples")  # present in a row = already graded
KINDS = ("math", "code")  # --reward: what a problem is and how a completion is scored
# schema fields that data.row_to_example turned into prompt/answer: replaced by them in the plain-schema output
# (kept, they would make data.detect_schema read the row as its old schema again)
CONSUMED = {"gsm8k": ("question",), "math": ("problem",), "aime": ("problem",), "dapo": ("reward_model",), "plain": ()}
PROGRESS_VERSION = 1


class GradeError(RuntimeError):
    """Bad settings, input or progress file; the message says what to do."""


# ------------------------------------------------------------------------------------------------
# Rules and levels
# ------------------------------------------------------------------------------------------------
RULES = {
    "skywork": ("keep 1..N-1 correct of N (Skywork-OR1 3.4)", lambda c, n: 0 < c < n),
    "mimo": ("keep pass rate <= 0.9 (MiMo 3.2)", lambda c, n: 10 * c <= 9 * n),  # integers: no float edge at 0.9
    "ringlite": ("drop all-correct and all-wrong (Ring-lite 4.3)", lambda c, n: 0 < c < n),
}


def keep_mask(rule: str, num_correct: list[int], num_samples: list[int]) -> list[bool]:
    if rule not in RULES:
        raise GradeError(f"unknown filter rule {rule!r}; expected one of {', '.join(RULES)}")
    fn = RULES[rule][1]
    return [bool(fn(c, n)) for c, n in zip(num_correct, num_samples)]


def difficulty_levels(pass_rates: list[float], k: int = 5) -> list[int]:
    """level = 1 + floor(k * (E + T / 2) / n): the bucket of the centre of the problem's tie block, easiest first."""
    n = len(pass_rates)
    first, count = {}, {}  # pass rate -> first position (easiest first), size of its tie block
    for pos, p in enumerate(sorted(pass_rates, reverse=True)):
        first.setdefault(p, pos)
        count[p] = count.get(p, 0) + 1
    # in integers: no float rounding at the bucket edges; E + T / 2 < n, so the level is at most k
    return [1 + (k * (2 * first[p] + count[p])) // (2 * n) for p in pass_rates]


def ranks(x: list[float]) -> list[float]:
    """1-based ranks, ties given their average rank."""
    order = sorted(range(len(x)), key=lambda i: x[i])
    r = [0.0] * len(x)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and x[order[j + 1]] == x[order[i]]:
            j += 1
        for t in range(i, j + 1):
            r[order[t]] = (i + j) / 2 + 1
        i = j + 1
    return r


def spearman(x: list[float], y: list[float]) -> float:
    """Spearman's rank correlation: Pearson's correlation of the average ranks (nan if either side is constant)."""
    if len(x) != len(y) or len(x) < 2:
        raise ValueError("spearman needs two sequences of the same length >= 2")
    rx, ry = ranks(x), ranks(y)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sxx, syy = sum((a - mx) ** 2 for a in rx), sum((b - my) ** 2 for b in ry)
    return sxy / math.sqrt(sxx * syy) if sxx > 0 and syy > 0 else float("nan")


def filter_table(num_correct: list[int], num_samples: list[int]) -> str:
    """The papers' table: all-wrong / all-right / mixed, then kept / dropped for each rule."""
    n = len(num_correct)
    pct = lambda k: f"{k:6d} ({100 * k / n:5.1f}%)" if n else f"{k:6d}"
    wrong = sum(c == 0 for c in num_correct)
    right = sum(c == s for c, s in zip(num_correct, num_samples))
    ns = sorted(set(num_samples))
    lines = [f"{n} problems, {'/'.join(map(str, ns))} samples each",
             f"  all-wrong {pct(wrong)}   all-right {pct(right)}   mixed {pct(n - wrong - right)}",
             f"  {'rule':9s} {'':46s} {'kept':>15s}  {'dropped':>15s}"]
    for name, (text, _) in RULES.items():
        k = sum(keep_mask(name, num_correct, num_samples))
        lines.append(f"  {name:9s} {text:46s} {pct(k)}  {pct(n - k)}")
    return "\n".join(lines)


def level_table(levels: list[int], pass_rates: list[float]) -> str:
    lines = ["  level  problems  pass rate (mean, min-max)"]
    for lv in range(1, 6):
        p = [pr for l, pr in zip(levels, pass_rates) if l == lv]
        if p:
            lines.append(f"  {lv:5d}  {len(p):8d}  {sum(p) / len(p):.3f} ({min(p):.3f}-{max(p):.3f})")
        else:
            lines.append(f"  {lv:5d}  {0:8d}  -")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------
# Grading (engine injected: tests pass a stub policy)
# ------------------------------------------------------------------------------------------------
@dataclass
class Graded:
    num_correct: int
    num_samples: int

    @property
    def pass_rate(self) -> float:
        return self.num_correct / self.num_samples


def problem_hash(ex: data.Example) -> str:
    blob = json.dumps([ex.prompt, ex.answer], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def batch_seed(seed: int, b: int) -> int:
    return int(hashlib.sha256(f"grade-{seed}-{b}".encode()).hexdigest()[:15], 16)


def _read_progress(path: str, examples, header: dict) -> dict[int, Graded] | None:
    """Graded problems from a sidecar (None if it has no complete header line); errors if it belongs to another
    input or to other settings."""
    done: dict[int, Graded] | None = None
    with open(path, encoding="utf-8") as f:
        lines = f.readlines()
    for ln, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            if ln == len(lines) and not line.endswith("\n"):  # torn last line of a killed run: graded again
                break
            raise GradeError(f"{path}:{ln}: corrupt progress line; delete {path} to grade from scratch") from None
        if ln == 1:
            if rec.get("grade_progress") != PROGRESS_VERSION:
                raise GradeError(f"{path}: not a tools/grade.py progress file; delete it or choose another --out")
            if rec.get("settings") != header["settings"]:
                old, new = rec.get("settings") or {}, header["settings"]
                diff = ", ".join(f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k))
                raise GradeError(f"{path}: an interrupted grading run with other settings ({diff}); rerun with the "
                                 f"same settings to resume it, or delete {path} to grade from scratch")
            done = {}
            continue
        i = rec.get("index")
        if not isinstance(i, int) or not 0 <= i < len(examples):
            raise GradeError(f"{path}:{ln}: problem index {i!r} is not in the input ({len(examples)} problems); "
                             f"the input changed since the interrupted run: delete {path} to grade from scratch")
        if rec.get("hash") != problem_hash(examples[i]):
            raise GradeError(f"{path}:{ln}: problem #{i} does not match the input (hash {rec.get('hash')} != "
                             f"{problem_hash(examples[i])}); the input changed since the interrupted run: restore it, "
                             f"or delete {path} to grade from scratch")
        try:
            done[i] = Graded(int(rec["num_correct"]), int(rec["num_samples"]))
        except (KeyError, TypeError, ValueError):
            raise GradeError(f"{path}:{ln}: corrupt progress line; delete {path} to grade from scratch") from None
    return done


def grade(examples: list[data.Example], engine, tokenizer, reward_fn, samples: int, *,
          params: SamplingParams | None = None, batch_prompts: int = 64, seed: int = 0,
          progress_path: str | None = None, settings: dict | None = None, progress: bool = True,
          kind: str = "math", template: str = "auto", system: str = "", template_kwargs: dict | None = None) -> list[Graded]:
    """Grade every example with `samples` completions from `engine`, scored by `reward_fn` -> (rewards, correct, m).

    Batch b holds examples [b * batch_prompts, (b + 1) * batch_prompts); the RNGs are seeded from (seed, b) before
    it. With `progress_path`, finished batches are appended there and skipped on a rerun (`settings` is recorded
    in its header and must match to resume).
    """
    if samples < 1:
        raise GradeError(f"samples must be >= 1, got {samples}")
    if batch_prompts < 1:
        raise GradeError(f"batch_prompts must be >= 1, got {batch_prompts}")
    params = params or SamplingParams()
    header = {"grade_progress": PROGRESS_VERSION, "settings": {
        "samples": samples, "seed": seed, "batch_prompts": batch_prompts, "temperature": params.temperature,
        "top_p": params.top_p, "max_new_tokens": params.max_new_tokens, "problems": len(examples), **(settings or {})}}
    header = json.loads(json.dumps(header))  # as it reads back from the file
    done: dict[int, Graded] | None = {}
    out_f = None
    if progress_path:
        done = _read_progress(progress_path, examples, header) if os.path.exists(progress_path) else None
        if done is not None:
            with open(progress_path, "rb+") as f:  # cut a torn last line so appends start on a fresh line
                content = f.read()
                if not content.endswith(b"\n"):
                    f.truncate(content.rfind(b"\n") + 1)
            out_f = open(progress_path, "a", encoding="utf-8")  # noqa: SIM115 (open for the whole run)
        else:
            done = {}
            out_f = open(progress_path, "w", encoding="utf-8")  # noqa: SIM115
            out_f.write(json.dumps(header) + "\n")
            out_f.flush()
    from runs import progress_bar

    bar = progress_bar(total=len(examples), initial=len(done), desc="grading", unit="problem", disable=not progress, dynamic_ncols=True)
    try:
        for b, s in enumerate(range(0, len(examples), batch_prompts)):
            idx = list(range(s, min(s + batch_prompts, len(examples))))
            if all(i in done for i in idx):
                continue
            exs = [examples[i] for i in idx]
            prompts = [build_prompt(tokenizer, ex.prompt, kind, template, system, template_kwargs) for ex in exs]
            with torch.random.fork_rng():  # the caller's RNG streams are left as they were
                torch.manual_seed(batch_seed(seed, b))
                state = random.getstate()
                random.seed(batch_seed(seed, b))
                try:
                    outs = engine.generate(prompts, samples, params)
                finally:
                    random.setstate(state)
            texts = [c.text for group in outs for c in group]
            if len(texts) != len(idx) * samples:
                raise GradeError(f"engine returned {len(texts)} completions for {len(idx)} prompts x {samples} samples")
            _, correct, _ = reward_fn(texts, [ex.answer for ex in exs for _ in range(samples)],
                                      truncated=[c.truncated for group in outs for c in group])  # rule 5: the engine's flag
            lines = []
            for k, (i, ex) in enumerate(zip(idx, exs)):
                g = Graded(sum(bool(x) for x in correct[k * samples : (k + 1) * samples]), samples)
                if i not in done:
                    lines.append(json.dumps({"index": i, "hash": problem_hash(ex), "num_correct": g.num_correct,
                                             "num_samples": g.num_samples, "pass_rate": g.pass_rate}) + "\n")
                done[i] = g
            if out_f is not None:
                out_f.write("".join(lines))
                out_f.flush()
                os.fsync(out_f.fileno())
            bar.update(len(lines))
    finally:
        bar.close()
        if out_f is not None:
            out_f.close()
    return [done[i] for i in range(len(examples))]


# ------------------------------------------------------------------------------------------------
# Input and output rows
# ------------------------------------------------------------------------------------------------
def is_code_row(row) -> bool:
    """A code problem row (coding/problems.py's schema): tests, or TACO's input_output; no math schema has them."""
    return isinstance(row, dict) and ("tests" in row or "input_output" in row)


def load_rows(spec: str, n: int = 0, seed: int = 0, split: str = "train", schema: str | None = None,
              kind: str = "math"):
    """(examples, rows, locations): the input as Examples and as rows to write back.

    math: plain-schema rows (prompt, answer) keeping the extra fields. code: each row as read (the problem dict of
    the built-in code task, plus its `level`), so load_code_dataset reads the output as it read the input."""
    if kind == "code":
        return load_code_rows(spec, n, seed, split)
    is_file = os.path.splitext(spec)[1].lower() in (".jsonl", ".json", ".parquet") or os.path.exists(spec)
    if spec == "builtin" or not is_file:
        exs = load_dataset(spec, split=split, n=n or None, seed=seed, schema=schema)
        rows = []
        for ex in exs:
            r = {"prompt": ex.prompt, "answer": ex.answer}
            if ex.level is not None:
                r["level"] = ex.level  # the source's own level (the built-in task's); `difficulty` wins on reading
            if ex.solution is not None:
                r["solution"] = ex.solution
            r.update(ex.meta)
            rows.append(r)
        return exs, rows, [f"{spec}[{i}]" for i in range(1, len(exs) + 1)]
    raw = data.read_rows(spec)
    if not raw:
        raise DataError(f"{spec}: no rows")
    raw = raw[:n] if n else raw
    exs, rows, locs = [], [], []
    for loc, row in raw:
        if is_code_row(row):
            raise DataError(f"{loc}: a code problem (field 'tests' or 'input_output'); grade code with --reward code")
        try:
            ex = data.row_to_example(row, schema)
            sch = schema or data.detect_schema(row)
        except ValueError as e:
            raise DataError(f"{loc}: {e}") from None
        r = {"prompt": ex.prompt, "answer": ex.answer}
        r.update({k: v for k, v in row.items() if k not in ("prompt", "answer") + CONSUMED.get(sch, ())})
        exs.append(ex)
        rows.append(r)
        locs.append(loc)
    return exs, rows, locs


def load_code_rows(spec: str, n: int = 0, seed: int = 0, split: str = "train"):
    """Code problems: the built-in code task ('builtin' / 'builtin-code') or a JSONL file of problems."""
    if spec in ("builtin", "builtin-code"):
        exs = load_dataset("builtin-code", split=split, n=n or None, seed=seed)
        rows = [{"question": ex.answer["question"], "tests": ex.answer["tests"], "fn_name": ex.answer["fn_name"],
                 "level": ex.level} for ex in exs]  # the task's own level; `difficulty` wins on reading
        return exs, rows, [f"{spec}[{i}]" for i in range(1, len(exs) + 1)]
    if os.path.splitext(spec)[1].lower() != ".jsonl":
        raise GradeError(f"--data {spec!r}: code problems come from 'builtin-code' or a .jsonl file "
                         f"(the schema of coding/code_reward.py)")
    exs = load_code_dataset(spec)  # checks every row; errors name the line and field
    raw = data.read_rows(spec)  # the same rows as read (both skip blank lines)
    if n:
        exs, raw = exs[:n], raw[:n]
    return exs, [dict(row) for _, row in raw], [loc for loc, _ in raw]


def write_rows(path: str, rows: list[dict]) -> None:
    """JSONL or Parquet by extension, atomically (temp file + rename)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    ext = os.path.splitext(path)[1].lower()
    if ext == ".jsonl":
        data.write_jsonl(path, rows)
    elif ext == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        tmp = path + ".tmp"
        pq.write_table(pa.Table.from_pylist(rows), tmp, compression="snappy")
        os.replace(tmp, path)
    else:
        raise GradeError(f"{path}: output must end in .jsonl or .parquet")


def check_out(path: str, kind: str = "math"):
    if os.path.splitext(path)[1].lower() not in (".jsonl", ".parquet"):
        raise GradeError(f"--out {path!r}: must end in .jsonl or .parquet")
    if kind == "code" and not path.lower().endswith(".jsonl"):
        raise GradeError(f"--out {path!r}: code problems are written as .jsonl (what load_code_dataset reads)")


def graded_stats(rows: list[dict], locs: list[str]) -> tuple[list[int], list[int]]:
    """(num_correct, num_samples) of already-graded rows; errors on a row that is not graded."""
    cs, ns = [], []
    for loc, r in zip(locs, rows):
        pr, ns_ = r.get("pass_rate"), r.get("num_samples")
        if pr is None or not isinstance(ns_, int) or isinstance(ns_, bool) or ns_ < 1:
            raise GradeError(f"{loc}: not graded (needs 'pass_rate' and an integer 'num_samples' >= 1); "
                             f"grade it first: python -m tools.grade grade --data ... --out ...")
        cs.append(round(pr * ns_))
        ns.append(ns_)
    return cs, ns


def relevel(rows: list[dict]) -> None:
    for r, lv in zip(rows, difficulty_levels([r["pass_rate"] for r in rows])):
        r["difficulty"] = lv


# ------------------------------------------------------------------------------------------------
# CLI
# ------------------------------------------------------------------------------------------------
class Parser(argparse.ArgumentParser):
    def error(self, message):  # one `error:` line (tools.cli.cli prints it, exit code 2) instead of usage + message
        raise SystemExit(f"error: {message}")


def build_parser():
    from config import add_threads
    from trainer.checks import PROBABILITY, above, at_least, number  # train.py's checks of the same values

    ap = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("grade", help="sample N completions per problem, write pass_rate / num_samples / difficulty")
    g.add_argument("--data", required=True, help="'builtin' (train split of the built-in task of the --reward's kind), "
                   "'builtin-math', 'builtin-code', a .jsonl/.json/.parquet file or a hub name (code: a .jsonl file)")
    g.add_argument("--reward", default=None, choices=KINDS, help="math (math-verify on the final answer) or code "
                   "(correct = every test passes); default: code for --data builtin-code, else math")
    g.add_argument("--out", required=True, help="output .jsonl or .parquet (math: plain schema; code: .jsonl, the rows as read)")
    g.add_argument("--model", default="", help="model path or hub name; empty = the built-in tiny model (code: its math+code one)")
    g.add_argument("--samples", type=number(int, at_least(1)), default=16, help="completions per problem (Skywork / MiMo: 16) (default: 16)")
    g.add_argument("--n", type=number(int, at_least(0, "(0 = all)")), default=0, help="grade the first N problems (0 = all; builtin: 20000)")
    g.add_argument("--split", default="train", help="split of a hub dataset / of the built-in task (default: train)")
    g.add_argument("--schema", default=None, choices=["gsm8k", "math", "aime", "dapo", "plain"], help="force an input schema (gsm8k, math, aime, dapo, plain); default: detected per row")
    g.add_argument("--filter", default=None, choices=list(RULES), help="write only the problems this rule keeps")
    g.add_argument("--relevel", action="store_true", help="with --filter: recompute levels among the kept problems")
    g.add_argument("--seed", type=number(int, at_least(0)), default=0, help="sampling seed (and the built-in task's seed) (default: 0)")
    g.add_argument("--rollout", default="hf", choices=["hf", "fast", "vllm"], help="generation engine (default: hf)")
    g.add_argument("--template", default="auto", choices=list(TEMPLATES), help="prompt template, as train.py "
                   "--template (default: auto)")
    g.add_argument("--system-prompt", default="", help="system prompt for the chat templates")
    g.add_argument("--chat-template-kwargs", default="", help="JSON object of chat template switches, as train.py's, "
                   "e.g. '{\"enable_thinking\": false}' (default: none)")
    g.add_argument("--stop", default="", help="stop strings, '||'-separated, as train.py --stop")
    g.add_argument("--temperature", type=number(float, above(0, "(temperature 0 is greedy decoding: the samples of a "
                   "problem would all be the same)")), default=1.0, help="sampling temperature (default: 1.0)")
    g.add_argument("--top-p", type=number(float, PROBABILITY), default=1.0, help="nucleus top-p (default: 1.0)")
    g.add_argument("--max-new-tokens", type=number(int, at_least(1)), default=None, help="response length cap (default: 64; code: 96)")
    g.add_argument("--batch-prompts", type=number(int, at_least(1)), default=64, help="problems per generation batch = per progress flush (default: 64)")
    g.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"], help="model dtype (default: auto)")
    g.add_argument("--reward-workers", type=number(int, at_least(0)), default=2, help="math-verify worker processes (0 = in process); code: "
                   "programs run at once (default: 2)")
    g.add_argument("--reward-timeout", type=number(float, above(0)), default=5.0, help="math: seconds per answer check (code: each "
                   "problem's time_limit, else 4 s per test) (default: 5.0)")
    g.add_argument("--force", action="store_true", help="regrade input that already has pass_rate / num_samples")
    g.add_argument("--quiet", action="store_true", help="no progress bar")
    add_threads(g)  # train.py's --threads (config.add_threads)
    f = sub.add_parser("filter", help="apply a paper's rule to an already-graded file (no regrading)")
    f.add_argument("--data", required=True, help="a graded .jsonl/.json/.parquet file (code problems: .jsonl)")
    f.add_argument("--rule", "--filter", dest="rule", required=True, choices=list(RULES))
    f.add_argument("--out", required=True, help="output .jsonl or .parquet")
    f.add_argument("--relevel", action="store_true", help="recompute levels among the kept problems")
    return ap


def parse_args(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in ("grade", "filter", "-h", "--help"):
        argv = ["grade"] + argv  # `python -m tools.grade --data ...` grades
    return build_parser().parse_args(argv)


def apply_filter(rows, cs, ns, rule, do_relevel):
    keep = keep_mask(rule, cs, ns)
    kept = [dict(r) for r, k in zip(rows, keep) if k]
    if do_relevel and kept:
        relevel(kept)
    return kept


def cmd_filter(a) -> list[dict]:
    first = data.read_rows(a.data)[:1]
    kind = "code" if first and is_code_row(first[0][1]) else "math"
    check_out(a.out, kind)
    _, rows, locs = load_rows(a.data, kind=kind)
    cs, ns = graded_stats(rows, locs)
    print(filter_table(cs, ns))
    kept = apply_filter(rows, cs, ns, a.rule, a.relevel)
    if not kept:
        raise GradeError(f"rule {a.rule!r} keeps none of the {len(rows)} problems; nothing written")
    write_rows(a.out, kept)
    print(f"{a.rule}: kept {len(kept)} of {len(rows)} problems -> {a.out}")
    return kept


def grading_kind(a) -> str:
    """'math' or 'code' from --reward and --data (builtin-code implies code); contradictions are errors."""
    implied = {"builtin-code": "code", "builtin-math": "math"}.get(a.data)
    kind = a.reward or implied or "math"
    if implied and kind != implied:
        raise GradeError(f"--data {a.data} is a {implied} task; it cannot be graded with --reward {kind}")
    if kind == "code" and a.schema:
        raise GradeError(f"--schema {a.schema} is a math schema; code problems have their own (coding/code_reward.py)")
    return kind


def cmd_grade(a, engine=None, tokenizer=None) -> list[dict]:
    kind = grading_kind(a)
    check_out(a.out, kind)
    if a.max_new_tokens is None:
        a.max_new_tokens = 96 if kind == "code" else 64  # the tiny model's programs need ~96 tokens
    if a.samples < 1 or a.batch_prompts < 1 or a.max_new_tokens < 1:
        raise GradeError("--samples, --batch-prompts and --max-new-tokens must be >= 1")
    tkw = parse_template_kwargs(a.chat_template_kwargs)
    exs, rows, locs = load_rows(a.data, n=a.n, seed=a.seed, split=a.split, schema=a.schema, kind=kind)
    graded = [loc for loc, r in zip(locs, rows) if any(k in r for k in GRADE_FIELDS)]
    if graded and not a.force:
        raise GradeError(f"{graded[0]}: already graded ({len(graded)} of {len(rows)} rows have pass_rate/num_samples); "
                         f"regrade with --force, or filter it without regrading: "
                         f"python -m tools.grade filter --data {a.data} --rule skywork|mimo|ringlite --out OUT")
    for r in rows:
        for k in GRADE_FIELDS + (("difficulty",) if a.force else ()):
            r.pop(k, None)
        if "difficulty" in r:  # a source rating that is not ours: kept under another name
            r["source_difficulty"] = r.pop("difficulty")
    source_levels = [ex.level for ex in exs]  # before grading: the input's own level, if any
    model_name = a.model
    engine_built = engine is None  # tests inject an engine: the math reward then checks answers in process
    if engine is None:
        set_threads(a.threads)
        from trainer import lora
        import rollout
        from tools import tiny

        model_name = a.model or tiny.get_tiny_model(tiny.CODE_RECIPE if kind == "code" else None)
        dtype = {"auto": torch.bfloat16 if torch.cuda.is_available() else torch.float32, "float32": torch.float32,
                 "bfloat16": torch.bfloat16}[a.dtype]
        model, tokenizer, engine_path = lora.load_any(model_name, dtype)  # a LoRA checkpoint: merged onto its base
        check_template(tokenizer, a.template, kind, template_kwargs=tkw)
        model = model.to("cuda" if torch.cuda.is_available() else "cpu").eval().requires_grad_(False)
        engine = rollout.make_engine(a.rollout, model, tokenizer, model_path=engine_path, seed=a.seed,
                                     max_model_len=512 if not a.model else None)
    # the prompt leaves a thought open (R1-Distill's template): each response is read as <think> + response, as in training
    thought_open = opens_thought(tokenizer, kind, a.template, a.system_prompt, tkw)
    if kind == "code":  # Ring-lite / Skywork grade code all-or-nothing: correct = every test passes
        from coding.code_reward import CodeReward

        reward_fn = CodeReward("all_or_nothing", workers=max(1, a.reward_workers), thought_open=thought_open)
    else:
        from reward import MathReward

        reward_fn = MathReward(1.0, 0.0, a.reward_timeout, a.reward_workers if engine_built else 0,
                               thought_open=thought_open)
    progress_path = a.out + ".partial.jsonl"
    params = SamplingParams(a.temperature, a.top_p, a.max_new_tokens, read_stops(a.stop))
    settings = {"data": a.data, "reward": kind, "model": model_name or "(injected engine)", "rollout": a.rollout, "n": a.n}
    if a.template != "auto" or a.system_prompt or a.stop:  # (absent otherwise: earlier progress files still resume)
        settings.update(template=a.template, system_prompt=a.system_prompt, stop=a.stop)
    if tkw:
        settings.update(chat_template_kwargs=tkw)
    try:
        res = grade(exs, engine, tokenizer, reward_fn, a.samples, params=params, batch_prompts=a.batch_prompts,
                    seed=a.seed, progress_path=progress_path, settings=settings, progress=not a.quiet, kind=kind,
                    template=a.template, system=a.system_prompt, template_kwargs=tkw)
    finally:
        reward_fn.close()
    prs = [g.pass_rate for g in res]
    for r, g, lv in zip(rows, res, difficulty_levels(prs)):
        r.update(pass_rate=g.pass_rate, num_samples=g.num_samples, difficulty=lv)
    cs, ns = [g.num_correct for g in res], [g.num_samples for g in res]
    print(filter_table(cs, ns))
    print(level_table([r["difficulty"] for r in rows], prs))
    if sum(lv is not None for lv in source_levels) >= 2:
        pairs = [(p, r["difficulty"], lv) for p, r, lv in zip(prs, rows, source_levels) if lv is not None]
        print(f"rank correlation with the input's own level ({len(pairs)} problems): "
              f"spearman(pass_rate, level) = {spearman([p[0] for p in pairs], [p[2] for p in pairs]):+.3f}, "
              f"spearman(difficulty, level) = {spearman([p[1] for p in pairs], [p[2] for p in pairs]):+.3f}")
    out = rows
    if a.filter:
        out = apply_filter(rows, cs, ns, a.filter, a.relevel)
        if not out:
            raise GradeError(f"rule {a.filter!r} keeps none of the {len(rows)} problems; nothing written "
                             f"(grading results kept in {progress_path})")
    write_rows(a.out, out)
    os.remove(progress_path)
    print(f"graded {len(rows)} problems x {a.samples} samples; wrote {len(out)} rows"
          f"{f' kept by {a.filter}' if a.filter else ''} -> {a.out}")
    return out


def main(argv=None, *, engine=None, tokenizer=None) -> list[dict]:
    """CLI entry point; `engine` / `tokenizer` replace the model (tests). Errors exit with one clear message."""
    a = parse_args(argv)
    try:
        return cmd_filter(a) if a.cmd == "filter" else cmd_grade(a, engine, tokenizer)
    except (DataError, GradeError) as e:
        raise SystemExit(f"error: {e}") from None
    except KeyboardInterrupt:
        if a.cmd == "filter":
            raise
        raise SystemExit(f"interrupted: the graded batches are kept in {a.out}.partial.jsonl; "
                         f"rerun the same command to resume") from None


if __name__ == "__main__":
    sys.exit(cli(main))
