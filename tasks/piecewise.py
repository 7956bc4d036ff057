"""The built-in code task ('builtin-code'): piecewise functions of one integer, a five-line program each, graded by
stdin/stdout tests in three difficulty levels (builtin_code_task), with the math task's split rule (tasks/split.py).
"""
from __future__ import annotations

import random

from data import DataError, Example
from tasks.split import split_of

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
