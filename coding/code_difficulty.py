"""
Assign difficulty levels to test cases from pass rates: the offline step of MiMo's
test-difficulty-driven reward (MiMo §3.3.1 "Assigning Difficulty to Tests Based on Pass Rates").

MiMo runs several models many times per problem, computes each test's pass rate over all the
generated solutions, and clusters tests into levels, lower pass rate = harder. The paper does not
give the clustering; we use quantile buckets with ties kept together:

  1. sort the tests of a problem by pass rate, highest (easiest) first;
  2. walk through groups of equal pass rate, giving each group the current level, and move to
     the next level once the tests placed so far reach level * n_tests / L (a group that would
     overshoot that target by more than it is missed without it opens the next level instead);
  3. renumber the levels used as 1..L' (L' <= L: fewer when ties or few tests leave gaps).

So every test with the same pass rate lands in the same level, levels hold roughly equal numbers
of tests, and a problem whose tests all have the same pass rate gets one level (its reward
then degenerates to all-or-nothing / fraction passed, see code_reward.py).

Input solutions, JSONL, one line per problem (several lines for one problem are merged):
  {"problem_id": "fib_mod" | 0, "completions": ["...```python ...```", ...]}   run in the sandbox
  {"problem_id": ..., "passed": [[true, false, ...], ...]}   per-solution outcomes already known
`problem_id` is the problem's "id" field, or its 0-based line index in --problems.

Output: the problems (normalised to the `tests` schema of code_reward.py) with each test's
`level` filled in, plus `test_levels` and `test_pass_rates`; written atomically (temp file in the
same directory, then rename), so a crash never leaves a half-written dataset.

Run:  python -m coding.code_difficulty --problems fixtures/code/problems.jsonl \
          --solutions samples.jsonl --levels 3 --out problems_leveled.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

from coding.code_reward import grade
from coding.problems import CodeDataError, load_code_problems
from tools.cli import cli


def assign_levels(pass_rates: list[float], num_levels: int) -> list[int]:
    """Level per test (1 = easiest) by quantile buckets over pass rates, ties kept together."""
    if num_levels < 1:
        raise ValueError("num_levels must be >= 1")
    n = len(pass_rates)
    order = sorted(range(n), key=lambda i: -pass_rates[i])
    raw = [0] * n
    level, placed, in_level, i = 1, 0, 0, 0
    while i < n:
        j = i
        while j < n and pass_rates[order[j]] == pass_rates[order[i]]:  # one group of ties
            j += 1
        target = level * n / num_levels
        if level < num_levels and in_level and abs(placed + j - i - target) > abs(placed - target):
            level, in_level = level + 1, 0  # the group fits the next bucket better than this one
        for k in order[i:j]:
            raw[k] = level
        placed, in_level = placed + j - i, in_level + j - i
        while level < num_levels and placed >= level * n / num_levels:
            level, in_level = level + 1, 0
        i = j
    used = sorted(set(raw))
    return [used.index(r) + 1 for r in raw]


def pass_rates(passed: list[list[bool]], num_tests: int) -> list[float]:
    """Fraction of solutions passing each test."""
    for row in passed:
        if len(row) != num_tests:
            raise ValueError(f"a 'passed' row has {len(row)} entries for {num_tests} tests")
    return [sum(bool(row[t]) for row in passed) / len(passed) for t in range(num_tests)]


def read_solutions(path: str, problems: list[dict]) -> dict[int, dict]:
    """problem index -> {"completions": [...], "passed": [[...]]} from the solutions JSONL."""
    by_id = {p["id"]: i for i, p in enumerate(problems) if "id" in p}
    out: dict[int, dict] = {}
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise CodeDataError(f"{where}: invalid JSON ({e.msg})") from None
            if "problem_id" not in row:
                raise CodeDataError(f"{where}: missing field 'problem_id'")
            pid = row["problem_id"]
            idx = by_id.get(pid, pid if isinstance(pid, int) and 0 <= pid < len(problems) else None)
            if idx is None:
                raise CodeDataError(f"{where}: unknown problem_id {pid!r}")
            if "completions" not in row and "passed" not in row:
                raise CodeDataError(f"{where}: missing field 'completions' (or 'passed')")
            entry = out.setdefault(idx, {"completions": [], "passed": []})
            entry["completions"] += row.get("completions", [])
            entry["passed"] += row.get("passed", [])
    return out


def run_solutions(problems: list[dict], sols: dict[int, dict], workers: int, progress: bool = True) -> None:
    """Grade every completion on every test (soft mode, no early stop) and append to 'passed'."""
    jobs = [(idx, c) for idx, entry in sols.items() for c in entry["completions"]]
    if not jobs:
        return
    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = pool.map(lambda job: grade(job[1], problems[job[0]], "soft", early_stop=False), jobs)
        if progress:
            try:
                from tqdm import tqdm  # optional
                results = tqdm(results, total=len(jobs), desc="grading", file=sys.stderr)
            except ImportError:
                pass
        for (idx, _), g in zip(jobs, results):
            sols[idx]["passed"].append([bool(p) for p in g.passed])


def write_jsonl_atomic(path: str, rows: list[dict]) -> None:
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-", suffix=".jsonl")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def level_problems(problems: list[dict], sols: dict[int, dict], num_levels: int) -> list[dict]:
    out = []
    for idx, p in enumerate(problems):
        p = dict(p)
        entry = sols.get(idx)
        if entry and entry["passed"]:
            rates = pass_rates(entry["passed"], len(p["tests"]))
            levels = assign_levels(rates, num_levels)
            p["tests"] = [dict(t, level=lv) for t, lv in zip(p["tests"], levels)]
            p["test_levels"], p["test_pass_rates"] = levels, rates
        else:
            print(f"warning: problem {p.get('id', idx)} has no solutions; levels left as they were", file=sys.stderr)
        out.append(p)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--problems", required=True, help="problems JSONL (code_reward.py schema)")
    ap.add_argument("--solutions", required=True, help="JSONL of {problem_id, completions | passed}")
    ap.add_argument("--levels", type=int, default=3, help="number of difficulty levels L")
    ap.add_argument("--out", required=True, help="output JSONL (written atomically)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="parallel sandbox runs")
    ap.add_argument("--no-progress", action="store_true", help="no tqdm progress bar")
    args = ap.parse_args(argv)
    try:
        problems = load_code_problems(args.problems)
        sols = read_solutions(args.solutions, problems)
    except CodeDataError as e:
        sys.exit(f"error: {e}")
    run_solutions(problems, sols, args.workers, progress=not args.no_progress)
    leveled = level_problems(problems, sols, args.levels)
    write_jsonl_atomic(args.out, leveled)
    for p in leveled:
        if "test_levels" in p:
            print(f"{p.get('id', '?')}: levels {p['test_levels']}  pass rates {[round(r, 2) for r in p['test_pass_rates']]}")


if __name__ == "__main__":
    sys.exit(cli(main))
