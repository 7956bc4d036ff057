"""The built-in math task ('builtin-math'): multi-operand addition that needs several steps of reasoning, written
out with worked steps ("17+25=42 42+9=51 \\boxed{51}"), difficulty levels 1-5, generated deterministically from a
seed; train and held-out splits disjoint (tasks/split.py).
"""
from __future__ import annotations

import random

from data import DataError, Example
from tasks.split import split_of

# Level k adds k single-digit numbers (1-9) to a first number in 1-99: k steps of worked reasoning, each one
# "accumulator + digit". Difficulty is the depth of the reasoning, not the size of the numbers, so a model
# of ~1M parameters can learn every step while answering a deep sum in one shot stays hard.
LEVELS = {k: k + 1 for k in range(1, 6)}  # level -> number of operands


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
