"""
Code rewards from test cases, run in sandbox.py.

Three modes (`mode=`):
  all_or_nothing  1 iff every test passes, else 0. Skywork-OR1 (`is_binary_reward=True` in its released code),
                  Ring-lite and DeepSeek-R1 use this.
  strict          MiMo §3.3.1 "Strict Reward": R = sum_l S_l * prod_{m<=l} 1[all tests of level m pass].
                  A level's score counts only if that level and every easier level pass completely.
  soft            MiMo §3.3.1 "Soft Reward": R = sum_l S_l * n_l / |T_l|. Each level's score is split
                  equally over its tests; the reward is the sum over passed tests.

Level scores S_l (MiMo leaves them unspecified): by default
`weights="equal"`, S_l = 1/L over the L distinct levels of the problem, like IOI subtasks of equal
value; `weights="tests"` makes S_l proportional to the number of tests in the level (then soft is
the plain fraction of tests passed). Either way the S_l sum to 1, so a full pass scores 1.
Levels are integers, 1 = easiest; code_difficulty.py assigns them from pass rates (lower pass
rate = harder = higher level). A problem without levels has one level holding all tests, so
strict == all_or_nothing and soft == fraction of tests passed.

Program extraction: the LAST fenced block tagged python/py/python3 or untagged (a final answer
usually comes after any sketches in the reasoning). No such block, or an unterminated one (a
truncated completion), gives reward 0 without running anything. Thinking models: a response that
opens with <think> (Qwen3's; with `thought_open`, the prompt ends inside a thought, R1-Distill's
template, and each completion is read as <think> + completion, as MathReward does) is searched only
after its thought: a program drafted inside the thought does not count, and a response cut off
inside its thought scores 0. The thought ends at the FIRST </think>, where the math reward takes the
last (reward.after_thought): a program may hold the text "</think>" (a parser, a template), and the
last block after the first close is the final program also when a model closes twice. A response
that does not open with <think> is searched whole, tags in its programs and all. Peers:
LiveCodeBench-style extraction as ROLL vendors it (`extract_code_generation`) keeps the text after
the last </think> of any response, then falls back to the whole text when there is no fence, which
the project does not.

Test styles:
  stdin/stdout   the program reads `input` on stdin; its stdout must equal `output` after
                 whitespace normalisation: per line, runs of spaces/tabs collapse and the ends are
                 stripped; trailing empty lines are ignored (as the APPS/TACO checkers do, minus their
                 float and token-set fallbacks).
  function call  with `fn_name`, the program defines that function (or `class Solution` with that
                 method, LiveCodeBench/LeetCode style); `input` is a JSON array of positional
                 arguments (or one JSON value per line, LiveCodeBench style); the return value,
                 JSON-encoded, must equal `output` (JSON); floats compare with 1e-6 tolerance;
                 `[value]` also matches `value`, since TACO wraps call outputs in a list.

Problem schema (JSONL, one problem per line; see fixtures/code/problems.jsonl):
  {"question": str, "tests": [{"input": str, "output": str, "level": int?}, ...],
   "fn_name": str?, "test_levels": [int, ...]?, "time_limit": float?}
  or TACO/APPS style: "input_output": '{"inputs": [...], "outputs": [...], "fn_name": ...}'
  (a JSON string or object) instead of "tests". `test_levels` (one per test) is what
  code_difficulty.py writes besides filling each test's `level`; a test's own `level` wins.
  Problem-level `difficulty` (1-5) and `pass_rate` are what tools/grade.py writes (`level`: the built-in code task's
  own); coding.problems.load_code_dataset reads them as the Example's level and pass rate, difficulty first.

Use from the trainer:
    from coding.code_reward import code_reward
    from coding.problems import load_code_problems
    problems = load_code_problems("fixtures/code/problems.jsonl")
    rewards = code_reward(completions, [problems[i] for i in idx], mode="soft", workers=8)
"""

from __future__ import annotations

import json
import math
import os
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from coding.problems import normalize_problem
from coding.sandbox import Limits, RunResult, run_python

MODES = ("all_or_nothing", "strict", "soft")
THINK_OPEN = "<think>"  # the thought's opening tag, as reward.THINK_OPEN (rewards import no reward module but data's)
DEFAULT_TIME_LIMIT = 4.0  # seconds per test when the problem gives no time_limit


# ----------------------------------------------------------------------------------------------
# Extraction and comparison
_FENCE = re.compile(r"^[ \t]*```[ \t]*([\w+.-]*)[^\n]*\n(.*?)^[ \t]*```", re.DOTALL | re.MULTILINE)
PYTHON_TAGS = ("", "python", "python3", "py")


def extract_code(completion: str) -> str | None:
    """The last complete fenced block tagged python (or untagged), after the thought of a response that opens with
    <think>; None when there is none (or that thought never closes)."""
    if completion.lstrip().startswith(THINK_OPEN):
        _, closed, completion = completion.partition("</think>")
        if not closed:
            return None
    blocks = [m.group(2) for m in _FENCE.finditer(completion) if m.group(1).lower() in PYTHON_TAGS]
    return blocks[-1] if blocks else None


def _norm_lines(text: str) -> list[str]:
    lines = [" ".join(line.split()) for line in text.strip().splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def stdout_matches(actual: str, expected: str) -> bool:
    return _norm_lines(actual) == _norm_lines(expected)


def values_match(actual, expected) -> bool:
    """JSON values equal, floats within 1e-6 (absolute or relative); bools never equal numbers."""
    if isinstance(actual, bool) or isinstance(expected, bool):
        return actual is expected
    if isinstance(actual, (int, float)) and isinstance(expected, (int, float)):
        return math.isclose(actual, expected, rel_tol=1e-6, abs_tol=1e-6)
    if isinstance(actual, list) and isinstance(expected, list):
        return len(actual) == len(expected) and all(map(values_match, actual, expected))
    if isinstance(actual, dict) and isinstance(expected, dict):
        return actual.keys() == expected.keys() and all(values_match(actual[k], expected[k]) for k in actual)
    return type(actual) is type(expected) and actual == expected


def call_args(inp: str) -> list:
    """Positional arguments from a test input: a JSON array, or one JSON value per line."""
    try:
        args = json.loads(inp)
        return args if isinstance(args, list) else [args]
    except json.JSONDecodeError:
        return [json.loads(line) for line in inp.splitlines() if line.strip()]


def test_passes(result: RunResult, test: dict, fn_name: str | None) -> bool:
    if not result.ok:
        return False
    if fn_name is None:
        return stdout_matches(result.stdout, test["output"])
    if not result.has_value:
        return False
    expected = json.loads(test["output"])
    return values_match(result.value, expected) or values_match([result.value], expected)


# ----------------------------------------------------------------------------------------------
# Scoring
def level_scores(levels: list[int], weights: str = "equal") -> dict[int, float]:
    """S_l for each distinct level, summing to 1 (see module docstring)."""
    distinct = sorted(set(levels))
    if weights == "equal":
        return {lv: 1.0 / len(distinct) for lv in distinct}
    if weights == "tests":
        return {lv: levels.count(lv) / len(levels) for lv in distinct}
    raise ValueError(f"weights must be 'equal' or 'tests', got {weights!r}")


def score(passed: list[bool | None], levels: list[int], mode: str = "all_or_nothing",
          weights: str = "equal") -> float:
    """Reward from per-test outcomes. `None` = not run (early stop), counted as failed."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    ok = [bool(p) for p in passed]
    if mode == "all_or_nothing":
        return float(all(ok))
    S = level_scores(levels, weights)
    total = 0.0
    for lv in sorted(S):  # easiest first
        level_ok = [p for p, l in zip(ok, levels) if l == lv]
        if mode == "strict":
            if not all(level_ok):
                break  # this level and every harder one score nothing
            total += S[lv]
        else:  # soft
            total += S[lv] * sum(level_ok) / len(level_ok)
    return total


@dataclass
class Graded:
    reward: float
    passed: list  # per test, in the problem's order: True / False / None (not run)
    results: list  # RunResult per test (None when not run)
    code: str | None


def grade(completion: str, problem: dict, mode: str = "all_or_nothing", weights: str = "equal",
          limits: Limits | None = None, early_stop: bool = True) -> Graded:
    """Extract the program, run the tests easiest level first, score.

    With early_stop, all_or_nothing and strict stop at the first failing test: nothing after it
    can change the reward (tests run in level order), so this only saves time. soft runs all.
    """
    if "tests" not in problem or any("level" not in t for t in problem["tests"]):
        problem = normalize_problem(problem)
    tests, fn_name = problem["tests"], problem.get("fn_name")
    levels = [t["level"] for t in tests]
    passed, results = [None] * len(tests), [None] * len(tests)
    code = extract_code(completion)
    if code is None:
        return Graded(0.0, passed, results, None)
    limits = limits or Limits(timeout=float(problem.get("time_limit", DEFAULT_TIME_LIMIT)))
    for i in sorted(range(len(tests)), key=lambda i: levels[i]):
        t = tests[i]
        if fn_name is None:
            r = run_python(code, t["input"], limits=limits)
        else:
            try:
                args = call_args(t["input"])
            except json.JSONDecodeError as e:
                raise ValueError(f"test {i}: input is not JSON arguments ({e.msg})") from None
            r = run_python(code, "", fn_name=fn_name, args=args, limits=limits)
        results[i], passed[i] = r, test_passes(r, t, fn_name)
        if early_stop and not passed[i] and mode != "soft":
            break
    return Graded(score(passed, levels, mode, weights), passed, results, code)


def code_reward(completions: list[str], problems: list[dict], mode: str = "all_or_nothing",
                workers: int | None = None, weights: str = "equal", limits: Limits | None = None,
                early_stop: bool = True) -> list[float]:
    """Batch rewards, one per (completion, problem) pair, computed in parallel.

    Each completion's tests run one after another (so early stopping works); completions run
    `workers` at a time (default: CPU count), each test in its own sandbox process. A program
    that occurs several times for the same problem in one call (a group's samples often agree)
    runs once and every copy gets its reward: ~20 ms of sandbox per test saved per copy. This
    assumes a program's result depends only on its text and input; one that reads the clock or
    randomness scores as its first run did, as it could have on any single run.
    """
    if len(completions) != len(problems):
        raise ValueError(f"{len(completions)} completions but {len(problems)} problems")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    problems = [p if "tests" in p and all("level" in t for t in p["tests"]) else normalize_problem(p)
                for p in problems]
    workers = workers or os.cpu_count() or 1
    keys = [(extract_code(c), json.dumps(p, sort_keys=True, default=str)) for c, p in zip(completions, problems)]
    first = {}  # (program, problem) -> index of its first occurrence
    for i, k in enumerate(keys):
        first.setdefault(k, i)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        unique = dict(zip(first.values(), pool.map(
            lambda i: grade(completions[i], problems[i], mode, weights, limits, early_stop).reward, first.values())))
    return [unique[first[k]] for k in keys]


def make_reward_fn(mode: str = "all_or_nothing", workers: int | None = None, weights: str = "equal"):
    """Hook for the training loop: `fn(completions, problems) -> list[float]` with the mode bound."""
    def reward_fn(completions: list[str], problems: list[dict]) -> list[float]:
        return code_reward(completions, problems, mode=mode, workers=workers, weights=weights)
    reward_fn.__name__ = f"code_reward_{mode}"
    return reward_fn


class CodeReward:
    """The trainer's reward interface for code: `(completions, problems) -> (rewards, correct, metrics)`.

    `correct` (what dynamic sampling and the pass-rate statistics use) means every test passed, whatever
    the scoring mode: a MiMo partial score is a shaped reward, not a correct program.
    """

    def __init__(self, mode: str = "all_or_nothing", workers: int | None = None, weights: str = "equal",
                 thought_open: bool = False):
        self.fn = make_reward_fn(mode, workers, weights)
        self.thought_open = thought_open  # the prompt opened a thought: each response is read as <think> + response

    def __call__(self, completions: list[str], problems: list[dict], truncated: list[bool] | None = None):
        """truncated (the Completions' flags, as MathReward takes them) is not read: a program runs or it does not."""
        if self.thought_open:
            completions = [THINK_OPEN + c for c in completions]
        rewards = self.fn(completions, problems)
        return rewards, [r >= 1.0 - 1e-9 for r in rewards], {"reward/timeouts": 0}

    def close(self):
        pass
