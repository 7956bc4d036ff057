"""Data: the built-in verifiable task, loaders for the common math schemas, and prompt building.

Notable features
  * A built-in task that needs several steps of reasoning: multi-operand addition, written out with
    worked steps ("17+25=42 42+9=51 \\boxed{51}"), difficulty levels 1-5, generated deterministically
    from a seed. Train and held-out splits are disjoint by construction: the split of a problem is a
    hash of its text, so no held-out problem can ever be drawn for training, whatever the seed.
  * A built-in code task ('builtin-code'): piecewise functions of one integer, a five-line program each, graded
    by stdin/stdout tests in three difficulty levels (see builtin_code_task), with the same split rule.
  * Loaders for local JSONL / JSON / Parquet files (and hub names when `datasets` is installed) that map
    the common schemas to (prompt, answer):
        gsm8k      question, answer ending in "#### N"
        math       problem, solution with \\boxed{...}  (an `answer` field wins when present: MATH-500)
        dapo       prompt (string or chat messages), reward_model.ground_truth   (DAPO-Math-17k)
        aime       problem, answer
        plain      prompt, answer                         (what `tools/grade.py` and this project write)
    Optional fields `difficulty` (1-5) and `pass_rate` are kept when present (offline grading, tools/grade.py).
  * Bad input stops with one error naming the file, line and field.
  * Prompt templates (`--template`, TEMPLATES): 'auto' (the default) is the tokenizer's chat template when it has
    one, a plain completion template otherwise, both with the instruction used by Ring-lite / Skywork-OR1 / MiMo
    ("Please reason step by step, and put your final answer within \\boxed{}."); 'chat' and 'plain' force either;
    'qwen-math' is Qwen2.5-Math's system prompt; 'r1-zero' DeepSeek-R1-Zero's completion template; 'dapo' DAPO's
    (an "Answer:" last line, what --reward math-dapo reads; also what 'auto' gives with that reward). A prompt is
    text the engines tokenize without adding special tokens: a chat template writes its own BOS, and the plain
    templates start with the tokenizer's BOS when it adds one (Llama), so a prompt never has two. A chat template's
    switches (Qwen3's `enable_thinking`) come from `--chat-template-kwargs` (JSON), passed to apply_chat_template;
    `opens_thought` tells whether the resulting prompt leaves a thought open (R1-Distill's `<think>\\n`), which the
    reward must know (reward.py, "Thoughts").
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import sys
from dataclasses import dataclass, field

INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
CODE_INSTRUCTION = "Write a complete Python 3 program (or the requested function) in one ```python code block at the end."
PLAIN_TEMPLATE = "Question: {question}\n" + INSTRUCTION + "\nAnswer: "
# DAPO's own prompt (BytedTsinghua-SIA/DAPO README): the answer goes on a last line
# "Answer: ...", which reward.MathReward(mode="math-dapo") reads as DAPO's code does. build_prompt(kind="math-dapo").
# Qwen2.5-Math's system prompt (its model card and evaluation code), with the question alone as the user turn: the
# template alone moves Qwen2.5-Math-1.5B on MATH-500 from 33.0 (no template) to 61.8 before any RL (the Dr. GRPO
# paper's "understand R1-Zero" study, Table 2).
QWEN_MATH_SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."
# DeepSeek-R1-Zero's template (DeepSeek-R1 paper, Table 1), "prompt" replaced by the question; a completion template
# (no chat turns): the answer is read inside <answer> </answer> (verifier/extract.py: final_text).
R1_ZERO_TEMPLATE = ("A conversation between User and Assistant. The user asks a question, and the Assistant solves it. "
                    "The assistant first thinks about the reasoning process in the mind and then provides the user with "
                    "the answer. The reasoning process and answer are enclosed within <think> </think> and <answer> "
                    "</answer> tags, respectively, i.e., <think> reasoning process here </think> <answer> answer here "
                    "</answer>. User: {question}. Assistant:")
TEMPLATES = {  # --template NAME: what each builds (build_prompt)
    "auto": "the tokenizer's chat template when it has one, else 'plain' (with --reward math-dapo: 'dapo')",
    "chat": "the tokenizer's chat template: the question and the \\boxed{} instruction as the user turn (+ --system-prompt)",
    "plain": "completion text for base models: 'Question: ...' + the instruction + 'Answer: '",
    "qwen-math": "the chat template with Qwen2.5-Math's system prompt and the question alone as the user turn",
    "r1-zero": "DeepSeek-R1-Zero's completion template (<think> </think> <answer> </answer>)",
    "dapo": "DAPO's template (an 'Answer:' last line; --reward math-dapo reads it), in the chat template if there is one",
}
DAPO_TEMPLATE = ("Solve the following math problem step by step. The last line of your response should be of the form "
                 "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n{question}\n\n"
                 "Remember to put your answer on its own line after \"Answer:\".")


class DataError(ValueError):
    """Bad input data; the message names the file, line and field."""


class ArgParser(argparse.ArgumentParser):
    """argparse with one `error:` line (cli prints it, exit code 2) instead of usage + message on a bad flag."""

    def error(self, message):
        raise SystemExit(f"error: {message} (python {self.prog} --help lists the options)")


def cli(main, argv=None) -> int:
    """Run a script's `main`: bad input ends in one line `error: ...` on stderr and exit code 2, no traceback.

    The scripts report bad input by raising DataError (data files) or SystemExit("error: ...") (flags, model and
    checkpoint directories), always before anything is written. Ctrl-C ends in one line `interrupted` and exit code
    130 (128 + SIGINT), as train.py's own (runs.interrupted). Returns the exit code: `sys.exit(data.cli(main))`.
    """
    import signal

    try:
        rc = main() if argv is None else main(argv)
        return rc if type(rc) is int else 0  # a main that returns its exit code (the tools) keeps it
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the one line, not a traceback from a second Ctrl-C
        print(f"interrupted ({os.path.basename(sys.argv[0]) or 'python'}): nothing more was written", file=sys.stderr)
        return 130
    except DataError as e:
        msg = f"error: {e}"
    except SystemExit as e:
        if not (isinstance(e.code, str) and e.code.startswith("error:")):
            raise
        msg = e.code
    print(msg, file=sys.stderr)
    return 2


@dataclass
class Example:
    prompt: str  # the problem statement (no template; see build_prompt)
    answer: str | dict  # gold answer, a string math-verify can parse; for code, the problem with its tests
    level: int | None = None  # difficulty 1-5 when known
    pass_rate: float | None = None  # measured pass rate when graded
    solution: str | None = None  # worked solution (built-in task only; used for the cold-start SFT)
    meta: dict = field(default_factory=dict)


# ------------------------------------------------------------------------------------------------
# Built-in task: multi-operand addition with worked steps
# ------------------------------------------------------------------------------------------------
# Level k adds k single-digit numbers (1-9) to a first number in 1-99: k steps of worked reasoning, each one
# "accumulator + digit". Difficulty is the depth of the reasoning, not the size of the numbers, so a model
# of ~1M parameters can learn every step while answering a deep sum in one shot stays hard.
LEVELS = {k: k + 1 for k in range(1, 6)}  # level -> number of operands
HELDOUT_PERCENT = 20  # share of the problem space reserved for evaluation (level 1 has 891 problems: ~180 held out)


def split_of(question: str) -> str:
    """'test' for about HELDOUT_PERCENT% of all problems, 'train' for the rest: a pure function of the text."""
    h = int(hashlib.sha256(question.encode()).hexdigest()[:8], 16)
    return "test" if h % 100 < HELDOUT_PERCENT else "train"


def worked_solution(operands: list[int]) -> str:
    """Left-to-right partial sums, one step per addition: '17+25=42 42+9=51 \\boxed{51}'."""
    steps, acc = [], operands[0]
    for x in operands[1:]:
        steps.append(f"{acc}+{x}={acc + x}")
        acc += x
    return " ".join(steps) + f" \\boxed{{{acc}}}"


def make_problem(rng: random.Random, level: int) -> Example:
    ops = [rng.randint(1, 99)] + [rng.randint(1, 9) for _ in range(LEVELS[level] - 1)]
    return Example(prompt="+".join(map(str, ops)), answer=str(sum(ops)), level=level, solution=worked_solution(ops))


def builtin_task(n: int, split: str = "train", seed: int = 0, levels=(1, 2, 3, 4, 5), weights=None) -> list[Example]:
    """`n` problems of `split` ('train' or 'test'), levels drawn with `weights` (uniform by default).

    Deterministic in (n, split, seed, levels, weights). The held-out split is deduplicated; the train split is
    not (a real dataset repeats easy problems too, and level 1 has only 891 distinct problems).
    """
    if split not in ("train", "test"):
        raise DataError(f"builtin task: split must be 'train' or 'test', got {split!r}")
    rng = random.Random(f"{seed}-{split}")
    out, seen = [], set()
    tries = 0
    while len(out) < n:
        tries += 1
        if tries > 100 * n + 10000:
            raise DataError(f"builtin task: cannot draw {n} distinct {split} problems at levels {levels}; ask for fewer")
        ex = make_problem(rng, rng.choices(list(levels), weights=weights)[0])
        if split_of(ex.prompt) != split or (split == "test" and ex.prompt in seen):
            continue
        seen.add(ex.prompt)
        out.append(ex)
    return out


# ------------------------------------------------------------------------------------------------
# Built-in code task: short programs graded by stdin/stdout tests of three difficulty levels
# ------------------------------------------------------------------------------------------------
# A problem is a piecewise function of one integer n (0-99): a base formula and 0-2 override clauses, e.g.
#     "Read n. Print n*3+2; if n>61 print n-7; if n<12 print 5."
# whose program is the clauses in order (a later `if` wins; the regions are disjoint):
#     n=int(input())
#     r=n*3+2
#     if n>61:r=n-7
#     if n<12:r=5
#     print(r)
# Tests are levelled by what they exercise: level 1 the base formula (n between the thresholds), level 2 the first
# override, level 3 the second; two tests per level, one of them on the threshold itself. A program that leaves a
# clause out passes the easier levels only, and one with a wrong threshold passes half a level, so MiMo's strict and
# soft rewards (coding/code_reward.py) differ. The problem's level is its number of clauses (1-3).
CODE_LEVELS = (1, 2, 3)
CODE_HEADER = "n=int(input())\n"


def _code_expr(rng: random.Random) -> tuple[str, object]:
    """An expression in n and its Python function: n*a+b, n-c, n+c or a constant."""
    kind = rng.choice(("lin", "sub", "add", "const"))
    a, b, c = rng.randint(2, 9), rng.randint(1, 9), rng.randint(1, 9)
    if kind == "lin":
        return f"n*{a}+{b}", lambda n: n * a + b
    if kind == "sub":
        return f"n-{c}", lambda n: n - c
    if kind == "add":
        return f"n+{c}", lambda n: n + c
    return f"{c}", lambda n: c


def make_code_problem(rng: random.Random, level: int) -> Example:
    """One piecewise problem with level - 1 override clauses; its answer is the problem with levelled tests."""
    base, f = _code_expr(rng)
    hi, lo = rng.randint(60, 89), rng.randint(10, 30)
    clauses = [(f"n>{hi}", lambda n: n > hi, hi + 1, rng.randint(hi + 2, 99)),
               (f"n<{lo}", lambda n: n < lo, lo - 1, rng.randint(0, lo - 2))]
    rng.shuffle(clauses)
    clauses = [(cond, test, edge, inner, *_code_expr(rng)) for cond, test, edge, inner in clauses[: level - 1]]

    def answer(n):
        r = f(n)
        for _, test, _, _, _, g in clauses:
            if test(n):
                r = g(n)
        return r

    text = f"Read n. Print {base}" + "".join(f"; if {cond} print {expr}" for cond, _, _, _, expr, _ in clauses) + "."
    base_ns = [lo if level > 1 else rng.randint(30, 59), rng.randint(31, 59)]  # a threshold itself is still base
    test_ns = [(n, 1) for n in base_ns] + [(n, lv) for lv, c in enumerate(clauses, 2) for n in (c[2], c[3])]
    tests = [{"input": f"{n}\n", "output": f"{answer(n)}\n", "level": lv} for n, lv in test_ns]
    program = CODE_HEADER + f"r={base}\n" + "".join(f"if {cond}:r={expr}\n" for cond, _, _, _, expr, _ in clauses) + "print(r)\n"
    problem = {"question": text, "tests": tests, "fn_name": None}
    return Example(prompt=text, answer=problem, level=level, solution=f"```python\n{program}```", meta={"kind": "code"})


def partial_program(ex: Example) -> str:
    """The base formula alone (the override clauses left out): the cold-start SFT's short style for code, which
    passes the level-1 tests only (the math task's bare answer is its counterpart)."""
    lines = ex.solution.split("\n")
    return "\n".join(line for line in lines if not line.startswith("if "))


def builtin_code_task(n: int, split: str = "train", seed: int = 0, levels=CODE_LEVELS) -> list[Example]:
    """`n` built-in code problems of `split`, levels uniform; disjoint splits (a hash of the text), deduplicated
    held-out split, deterministic in (n, split, seed, levels)."""
    if split not in ("train", "test"):
        raise DataError(f"builtin-code task: split must be 'train' or 'test', got {split!r}")
    rng = random.Random(f"code-{seed}-{split}")
    out, seen, tries = [], set(), 0
    while len(out) < n:
        tries += 1
        if tries > 100 * n + 10000:
            raise DataError(f"builtin-code task: cannot draw {n} distinct {split} problems at levels {levels}; ask for fewer")
        ex = make_code_problem(rng, rng.choice(list(levels)))
        if split_of(ex.prompt) != split or (split == "test" and ex.prompt in seen):
            continue
        seen.add(ex.prompt)
        out.append(ex)
    return out


# ------------------------------------------------------------------------------------------------
# File and hub loaders
# ------------------------------------------------------------------------------------------------
_BOXED = "\\boxed"


def last_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...} in `text` (balanced braces), or None.

    `\\boxed 5` (LaTeX's brace-less argument, which MATH's `last_boxed_only_string` also reads) gives the token
    after the space, up to whitespace or `$`. Anything else after `\\boxed` (`\\boxedx`, `\\boxed.`) is no answer:
    a brace further on belongs to other text."""
    i = text.rfind(_BOXED)
    if i < 0:
        return None
    rest = text[i + len(_BOXED):]
    if not rest.lstrip().startswith("{"):
        if rest[:1] in (" ", "\t") and rest.split():
            return rest.split()[0].split("$")[0]
        return None
    j = i + len(_BOXED) + rest.index("{")
    depth = 0
    for k in range(j, len(text)):
        if text[k] == "{":
            depth += 1
        elif text[k] == "}":
            depth -= 1
            if depth == 0:
                return text[j + 1 : k]
    return None


def _chat_content(prompt) -> str:
    """DAPO-Math-17k stores the prompt as chat messages; take the (last) user turn."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        users = [m.get("content", "") for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        if users:
            return users[-1]
    raise ValueError("field 'prompt' is neither a string nor a list of chat messages with a user turn")


def detect_schema(row: dict) -> str:
    if "reward_model" in row and "prompt" in row:
        return "dapo"
    if "question" in row and "answer" in row:
        return "gsm8k"
    if "problem" in row and ("solution" in row or "answer" in row):
        return "math" if "solution" in row else "aime"
    if "prompt" in row and "answer" in row:
        return "plain"
    raise ValueError(
        f"unknown schema with fields {sorted(row)}; expected one of: gsm8k (question, answer '#### N'), "
        "math (problem, solution/answer), aime (problem, answer), dapo (prompt, reward_model.ground_truth), "
        "plain (prompt, answer)"
    )


def row_to_example(row: dict, schema: str | None = None) -> Example:
    """Map one row of a known schema to an Example; raises ValueError naming the field at fault."""
    if not isinstance(row, dict):
        raise ValueError(f"row is a {type(row).__name__}, expected an object")
    schema = schema or detect_schema(row)
    if schema == "gsm8k":
        q, a = row.get("question"), row.get("answer")
        if not isinstance(a, str) or "####" not in a:
            raise ValueError("field 'answer' has no '#### <final answer>' (GSM8K schema)")
        a = a.split("####")[-1].strip().replace(",", "")
    elif schema in ("math", "aime"):
        q = row.get("problem")
        a = row.get("answer")
        if a in (None, "") and isinstance(row.get("solution"), str):
            a = last_boxed(row["solution"])
            if a is None:
                raise ValueError("field 'solution' has no \\boxed{...} and there is no 'answer' field")
    elif schema == "dapo":
        q = _chat_content(row.get("prompt"))
        pre, post = DAPO_TEMPLATE.split("{question}")
        if isinstance(q, str) and q.startswith(pre) and q.endswith(post):  # DAPO-Math-17k stores the question inside
            q = q[len(pre):-len(post)]  # DAPO's template: the bare question, so that --template builds it once
        rm = row.get("reward_model")
        a = rm.get("ground_truth") if isinstance(rm, dict) else None
        if a in (None, ""):
            raise ValueError("field 'reward_model.ground_truth' is missing or empty (DAPO schema)")
    elif schema == "plain":
        q, a = row.get("prompt"), row.get("answer")
    else:
        raise ValueError(f"unknown schema {schema!r}")
    qname = {"gsm8k": "question", "dapo": "prompt", "plain": "prompt"}.get(schema, "problem")
    if not isinstance(q, str) or not q.strip():
        raise ValueError(f"field '{qname}' is missing or empty")
    if a is None or (isinstance(a, str) and not a.strip()):
        raise ValueError("field 'answer' is missing or empty")
    level, pr = level_and_pass_rate(row)
    keep = {k: v for k, v in row.items() if k in ("num_samples", "id", "source")}
    return Example(prompt=q, answer=str(a).strip(), level=level, pass_rate=pr, meta=keep)


def level_and_pass_rate(row: dict) -> tuple[int | None, float | None]:
    """(level, pass_rate) of a row: `difficulty` (tools/grade.py's graded level) wins over `level` (the source's own);
    MATH's "Level 3" reads as 3, labels off the 1-5 scale ("Level ?", "EASY") as unknown. Raises ValueError naming
    the field when an integer level is outside 1-5 or `pass_rate` outside [0, 1]."""
    level = row.get("difficulty", row.get("level"))
    if level is not None:
        if isinstance(level, str) and level.strip().startswith("Level "):  # MATH: "Level 1".."Level 5", "Level ?"
            level = level.strip()[len("Level "):]
        try:
            level = int(level)
        except (TypeError, ValueError):
            level = None  # "Level ?" and other labels off the 1-5 scale: unknown
        if level is not None and not 1 <= level <= 5:
            raise ValueError(f"field 'difficulty' must be an integer 1-5, got {level}")
    pr = row.get("pass_rate")
    if pr is not None and not (isinstance(pr, (int, float)) and 0.0 <= pr <= 1.0):
        raise ValueError(f"field 'pass_rate' must be a number in [0, 1], got {pr!r}")
    return level, pr


def read_rows(path: str) -> list[tuple[str, dict]]:
    """(location, row) pairs from a .jsonl / .json / .parquet file; location is 'file:line' or 'file:row'."""
    if not os.path.exists(path):
        raise DataError(f"{path}: no such file")
    ext = os.path.splitext(path)[1].lower()
    try:
        if ext == ".jsonl":
            rows = []
            with open(path, encoding="utf-8") as f:
                for i, line in enumerate(f, 1):
                    if not line.strip():
                        continue
                    try:
                        rows.append((f"{path}:{i}", json.loads(line)))
                    except json.JSONDecodeError as e:
                        raise DataError(f"{path}:{i}: invalid JSON ({e.msg})") from None
            return rows
        if ext == ".json":
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
            if isinstance(data, dict) and "data" in data:
                data = data["data"]
            if not isinstance(data, list):
                raise DataError(f"{path}: expected a JSON list of objects (or {{'data': [...]}})")
            return [(f"{path}:row {i}", r) for i, r in enumerate(data, 1)]
        if ext == ".parquet":
            import pyarrow.parquet as pq

            return [(f"{path}:row {i}", r) for i, r in enumerate(pq.read_table(path).to_pylist(), 1)]
    except DataError:
        raise
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DataError(f"{path}: cannot read ({e})") from None
    except Exception as e:  # pyarrow raises its own error types for corrupt files
        raise DataError(f"{path}: cannot read ({type(e).__name__}: {e})") from None
    raise DataError(f"{path}: unsupported file type {ext!r} (use .jsonl, .json or .parquet)")


def load_file(path: str, schema: str | None = None) -> list[Example]:
    rows = read_rows(path)
    if not rows:
        raise DataError(f"{path}: no rows")
    out = []
    for loc, row in rows:
        try:
            out.append(row_to_example(row, schema))
        except ValueError as e:
            raise DataError(f"{loc}: {e}") from None
    return out


def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the Hugging Face hub answers a TCP connection (HF_HUB_OFFLINE=1 says no without asking). One quick
    check instead of transformers' ~50 s of retries on a machine with no network."""
    import socket
    from urllib.parse import urlparse

    if os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes"):
        return False
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    try:
        socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)), timeout=timeout).close()
        return True
    except OSError:
        return False


OFFLINE_HINT = ("where there is network, `pip install datasets` and run `python examples/prepare_data.py SET`, then "
                "pass the .jsonl file it writes; or download the data elsewhere and convert the file here with "
                "`python examples/prepare_data.py SET --source NAME=FILE`")


def load_hub(name: str, split: str, schema: str | None = None) -> list[Example]:
    online = hub_reachable()
    if not online:  # the datasets cache only; the offline switch is read when datasets is imported
        os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        import datasets
    except ImportError:
        if not online:
            raise DataError(f"{name}: not a local file, and the hub cannot be reached from this machine (no network; "
                            f"nor is the `datasets` package installed): {OFFLINE_HINT}") from None
        raise DataError(f"{name}: not a local file, and the `datasets` package is not installed to fetch it from the hub") from None
    cfg = None
    if ":" in name:  # "openai/gsm8k:main"
        name, cfg = name.split(":", 1)
    try:
        ds = datasets.load_dataset(name, cfg, split=split)
    except Exception as e:  # datasets raises many types (ConnectionError, DatasetNotFoundError, ValueError, ...)
        if not online:
            raise DataError(f"{name}: not a local file, not in the datasets cache, and the hub cannot be reached from "
                            f"this machine (no network): {OFFLINE_HINT}") from None
        raise DataError(f"{name}[{split}]: cannot load it as a hub dataset: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    out = []
    for i, row in enumerate(ds, 1):
        try:
            out.append(row_to_example(dict(row), schema))
        except ValueError as e:
            raise DataError(f"{name}[{split}] row {i}: {e}") from None
    return out


def load_code_dataset(path: str) -> list[Example]:
    """Code problems (question, tests or TACO-style input_output, optional fn_name; see normalize_problem).

    The Example's `answer` is the normalised problem itself: the code reward (coding/code_reward.py) runs its tests.
    Its `level` and `pass_rate` are read as for math rows (level_and_pass_rate): tools/grade.py's `difficulty` wins over a
    `level` field (the built-in code task's own level, as tools/grade.py writes it).
    """
    try:
        problems = load_code_problems(path)
    except CodeDataError as e:
        raise DataError(str(e)) from None
    out = []
    for p in problems:
        level, pass_rate = level_and_pass_rate(p)
        out.append(Example(prompt=p["question"], answer=p, level=level, pass_rate=pass_rate, meta={"kind": "code"}))
    return out


# ------------------------------------------------------------------------------------------------
# Code problems: the schema the code reward reads
# ------------------------------------------------------------------------------------------------
class CodeDataError(ValueError):
    """Bad problem data; the message names the file, line and field."""


# ----------------------------------------------------------------------------------------------
# Problems
def normalize_problem(problem: dict) -> dict:
    """Canonical form: {"question", "tests": [{"input": str, "output": str, "level": int}], "fn_name"}.

    Accepts our schema and the TACO/APPS `input_output` one. Raises ValueError naming the field.
    """
    if "tests" in problem:
        tests, fn_name = problem["tests"], problem.get("fn_name")
        if not isinstance(tests, list):
            raise ValueError("field 'tests' must be a list")
    elif "input_output" in problem:
        io = problem["input_output"]
        if isinstance(io, str):
            try:
                io = json.loads(io)
            except json.JSONDecodeError as e:
                raise ValueError(f"field 'input_output' is not valid JSON ({e.msg})") from None
        if not isinstance(io, dict) or "inputs" not in io or "outputs" not in io:
            raise ValueError("field 'input_output' must hold 'inputs' and 'outputs'")
        if len(io["inputs"]) != len(io["outputs"]):
            raise ValueError("field 'input_output': 'inputs' and 'outputs' differ in length")
        fn_name = problem.get("fn_name") or io.get("fn_name")
        tests = [{"input": i, "output": o} for i, o in zip(io["inputs"], io["outputs"])]
    else:
        raise ValueError("missing field 'tests' (or 'input_output')")
    if not tests:
        raise ValueError("field 'tests' is empty")
    levels = problem.get("test_levels")
    if levels is not None and len(levels) != len(tests):
        raise ValueError(f"field 'test_levels' has {len(levels)} entries for {len(tests)} tests")
    out = []
    for i, t in enumerate(tests):
        if not isinstance(t, dict):
            raise ValueError(f"test {i}: must be an object")
        for k in ("input", "output"):
            if k not in t:
                raise ValueError(f"test {i}: missing field '{k}'")
        level = t.get("level", levels[i] if levels is not None else 1)
        if not isinstance(level, int) or isinstance(level, bool) or level < 1:
            raise ValueError(f"test {i}: field 'level' must be an integer >= 1, got {level!r}")
        out.append({"input": _as_text(t["input"], fn_name), "output": _as_text(t["output"], fn_name),
                    "level": level})
    norm = dict(problem)
    norm.update(tests=out, fn_name=fn_name)
    norm.pop("input_output", None)
    return norm


def _as_text(x, fn_name):
    """Test inputs/outputs as strings. TACO sometimes stores stdin/stdout tests as lists of lines
    and call tests as JSON values (argument lists, return values) rather than JSON text."""
    if isinstance(x, str):
        return x
    return "\n".join(map(str, x)) if fn_name is None else json.dumps(x)


def load_code_problems(path: str) -> list[dict]:
    """Read a JSONL of problems and normalise them. Errors read like `file.jsonl:3: missing field 'tests'`."""
    if not os.path.exists(path):
        raise CodeDataError(f"{path}: no such file")
    problems = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise CodeDataError(f"{path}:{lineno}: invalid JSON ({e.msg})") from None
            try:
                if not isinstance(row, dict):
                    raise ValueError("a problem must be a JSON object")
                if not isinstance(row.get("question"), str):
                    raise ValueError("missing field 'question'")
                level_and_pass_rate(row)  # a graded file's difficulty / pass_rate, checked here for the line number
                problems.append(normalize_problem(row))
            except ValueError as e:
                raise CodeDataError(f"{path}:{lineno}: {e}") from None
    if not problems:
        raise CodeDataError(f"{path}: no problems")
    return problems


def load_dataset(spec: str, split: str = "train", n: int | None = None, seed: int = 0, schema: str | None = None) -> list[Example]:
    """'builtin-math' / 'builtin-code' -> a built-in task ('builtin': the one of `schema`, math unless 'code'); a path ->
    load_file; anything else -> a hub dataset name.

    schema='code' reads code problems (load_code_dataset); otherwise the math schemas are detected per row.
    """
    if spec == "builtin-code" or (spec == "builtin" and schema == "code"):
        return builtin_code_task(n or (20000 if split == "train" else 200), split=split, seed=seed)
    if schema == "code":
        data = load_code_dataset(spec)
        return data[:n] if n else data
    if spec in ("builtin", "builtin-math"):
        return builtin_task(n or (20000 if split == "train" else 500), split=split, seed=seed)
    if os.path.splitext(spec)[1].lower() in (".jsonl", ".json", ".parquet") or os.path.exists(spec):
        data = load_file(spec, schema)
    else:
        data = load_hub(spec, split, schema)
    return data[:n] if n else data


def write_jsonl(path: str, rows: list[dict]) -> None:
    """Atomic write: a reader never sees half a file."""
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    os.replace(tmp, path)


# ------------------------------------------------------------------------------------------------
# Prompts
# ------------------------------------------------------------------------------------------------
def build_prompt(tokenizer, question: str, kind: str = "math", template: str = "auto", system: str = "",
                 template_kwargs: dict | None = None) -> str:
    """The prompt text for `question` (TEMPLATES; the module docstring).

    kind: 'math' (the \\boxed{} instruction), 'code', or 'math-dapo' (DAPO's template, the question inside it).
    template 'auto' with kind 'math-dapo' is 'dapo'; a code question keeps its instruction under any template but
    'qwen-math' and 'r1-zero' (math templates: refused by check_template). template_kwargs: extra variables for the
    chat template (`--chat-template-kwargs`, e.g. Qwen3's {"enable_thinking": false}), passed to
    apply_chat_template as TRL's `chat_template_kwargs` (f2cd577, 2026-07-24) and verl's `apply_chat_template_kwargs`
    (1dda039, 2026-08-22) are."""
    has_chat = bool(getattr(tokenizer, "chat_template", None))
    if template == "auto":
        template = "dapo" if kind == "math-dapo" else "chat" if has_chat else "plain"
    if template in ("chat", "qwen-math") or (template == "dapo" and has_chat):
        if template == "qwen-math":
            system, content = system or QWEN_MATH_SYSTEM, question
        elif template == "dapo":
            content = DAPO_TEMPLATE.replace("{question}", question)
        else:
            content = f"{question}\n{CODE_INSTRUCTION if kind == 'code' else INSTRUCTION}"
        msgs = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": content}]
        return tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, **(template_kwargs or {}))
    if template == "dapo":
        text = DAPO_TEMPLATE.replace("{question}", question) + "\n\n"
    elif template == "r1-zero":
        text = R1_ZERO_TEMPLATE.replace("{question}", question)
    else:
        text = PLAIN_TEMPLATE.replace("{question}", question).replace(INSTRUCTION, CODE_INSTRUCTION if kind == "code" else INSTRUCTION)
    return _bos(tokenizer) + (f"{system}\n\n" if system else "") + text


def opens_thought(tokenizer, kind: str = "math", template: str = "auto", system: str = "",
                  template_kwargs: dict | None = None) -> bool:
    """Does the prompt leave a thought open, so that the response starts inside it? DeepSeek-R1-Distill's chat
    template ends its generation prompt with `<think>\\n` (so does Qwen3-Thinking-2507's); Qwen3's hybrid template
    opens none (the model writes `<think>` itself) and with enable_thinking false writes a closed, empty one. Read off
    the text the template puts after a question: its last `<think>` comes after its last `</think>`. The reward reads
    such responses as `<think>` + response (reward.py, "Thoughts")."""
    marker = "\x00question\x00"
    tail = build_prompt(tokenizer, marker, kind, template, system, template_kwargs).rsplit(marker, 1)[-1]
    return tail.rfind("<think>") > tail.rfind("</think>")


def read_stops(text: str) -> tuple[str, ...]:
    """--stop's strings: split on '||', the escapes \\n \\t \\r and \\\\ read, any other backslash kept as typed (a stop
    string such as '\\boxed' must not become a backspace and 'oxed', as Python's unicode_escape would read it)."""
    escapes = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\"}
    return tuple(re.sub(r"\\([ntr\\])", lambda m: escapes[m.group(1)], x) for x in text.split("||") if x) if text else ()


def parse_template_kwargs(text: str, flag: str = "--chat-template-kwargs") -> dict:
    """`--chat-template-kwargs` as a dict: a JSON object ('' = none); anything else is one `error:` line."""
    if not text:
        return {}
    try:
        kw = json.loads(text)
    except json.JSONDecodeError as e:
        raise SystemExit(f"error: {flag}: not JSON ({e.msg} at character {e.pos}): {text!r}") from None
    if not isinstance(kw, dict):
        raise SystemExit(f"error: {flag}: must be a JSON object such as '{{\"enable_thinking\": false}}', got {text!r}")
    return kw


def _bos(tokenizer) -> str:
    """The BOS text a plain prompt starts with: the tokenizer's, when it adds one itself (Llama), else ''. Prompts are
    tokenized with add_special_tokens=False everywhere, so this is the prompt's only BOS."""
    bos = getattr(tokenizer, "bos_token", None)
    if not bos:
        return ""
    ids = tokenizer("a")["input_ids"]
    return bos if ids and ids[0] == tokenizer.bos_token_id else ""


def check_template(tokenizer, template: str, kind: str, flag: str = "--template", template_kwargs: dict | None = None) -> None:
    """One `error:` line for a template this tokenizer or task cannot use."""
    if template_kwargs and not getattr(tokenizer, "chat_template", None):
        raise SystemExit("error: --chat-template-kwargs: the tokenizer has no chat template to pass them to")
    if template_kwargs and template in ("plain", "r1-zero"):
        raise SystemExit(f"error: --chat-template-kwargs: {flag} {template} is a completion template, not the chat template")
    if template not in TEMPLATES:
        raise SystemExit(f"error: {flag} {template!r}: not one of {', '.join(TEMPLATES)}")
    if template in ("chat", "qwen-math") and not getattr(tokenizer, "chat_template", None):
        raise SystemExit(f"error: {flag} {template}: the tokenizer has no chat template (use --template plain or auto)")
    if template in ("qwen-math", "r1-zero", "dapo") and kind == "code":
        raise SystemExit(f"error: {flag} {template}: a math template, and this task is code (use auto, chat or plain)")
    if template == "dapo" and kind != "math-dapo":
        raise SystemExit(f"error: {flag} dapo: its answer is an 'Answer:' line, which only --reward math-dapo reads")
