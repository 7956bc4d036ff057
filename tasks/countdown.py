"""Countdown: reach a target number from 3-5 given numbers with + - * / and parentheses.

The task of TinyZero, mini-R1 and nano-aha-moment (their Countdown data: `Jiayi-Pan/Countdown-Tasks-3to4`), here
generated from a seed with difficulty levels and an exact solver, so that it runs on a laptop with nothing downloaded.
A problem: "Using the numbers [25, 3, 7, 50], create an equation that equals 178 ...". Many equations are right, and
finding one takes search: try a step, check it, back off; that is what makes response lengths and entropy vary.

Answer format: the equation alone (no "= 178") inside the LAST `<answer>...</answer>` pair of the completion,
e.g. `<answer>25 * 7 + 3</answer>`; text before and after the pair is not read. The question says so.

Reward (countdown_reward(completion, problem) -> 1.0 or 0.0), in order; the first rule that fails scores 0:
  1. The completion has an `<answer>...</answer>` pair (the last one counts, found with rfind: linear time).
  2. Its content, stripped of the whitespace around it, is at most MAX_ANSWER_CHARS characters (a 5-number equation
     needs under 40): a right equation padded with newlines inside the tags is read, not refused.
  3. It tokenizes into non-negative integer literals, `+ - * /` (also `×` `÷` `−`, the same operations in print),
     parentheses and spaces; nothing else: no names, no `.` (so `2.5` is refused, not read as 2 and 5), no `=`.
  4. It parses (a hand-written recursive-descent parser, never eval) as binary operations only: `**` and `//` are two
     operators in a row and do not parse; unary minus and plus are refused (the targets are positive, and an equation
     with unary signs equals plus or minus one without them, so they are never needed); parentheses nest at most
     MAX_DEPTH deep.
  5. Each literal is one of the given numbers as written (`07` is not 7), and no number is used more often than it is
     given (a 5 given twice may be used twice). Numbers may be left unused ("at most once", below).
  6. It evaluates exactly with fractions.Fraction (no float, no 1e-5 tolerance); a division by zero scores 0.
  7. The value equals the target exactly: 1.0. Otherwise 0.0.
Every rule is checked on a bounded input (rules 1-2 before any parsing), so a 1 MB string, `9**9**9` or 10^5 nested
parentheses score 0 in well under a millisecond of parsing; nothing can hang the reward.

Where the peers differ, and what this project does:
  * Numbers used at most once, not exactly once. TinyZero, mini-R1 and nano-aha-moment check that the sorted literals
    equal the sorted numbers (all used, once each), while their own prompts say only "each number can only be used
    once". The project follows the prompt and the TV game's rule (numbers may be left over): what the question says is
    what is graded, and difficulty can then be "how many operations the shortest solution needs" (levels, below),
    which under all-used would always be len(numbers) - 1. Every equation the peers accept is accepted here.
  * Reward 0/1, no format credit. TinyZero gives 0.1 to any formatted wrong answer and nano-aha-moment adds a format
    reward; then a group with no solution but mixed formatting still has a nonzero advantage, and a policy can earn
    reward without solving anything. The project's math reward is 0/1 too; a format bonus can be added by the caller.
  * The last `<answer>` pair, anywhere in the text. TinyZero reads only the last line (an answer followed by one more
    line scores 0); nano-aha-moment and mini-R1 take the first pair and only on one line.
  * A parser instead of a character regex + eval. The peers' `^[\\d+\\-*/().\\s]+$` admits `**` and `//`, hangs on
    `9**9**9`, lets `2.5*2` pass the number check for [2, 5, 2], and compares floats at 1e-5.

Data (generate): level -> (how many numbers, operations the shortest solution needs, number range, target range):
LEVELS below. A problem's numbers are drawn, a random expression over ops + 1 of them gives the target, and the exact
solver keeps the problem only if no expression over fewer numbers reaches it: so every problem is solvable, with a
shortest solution of exactly the level's length (stored as "answer": one right equation among many). The held-out
split ('test') is the set of problems whose sorted numbers hash into HELDOUT_PERCENT of 100 buckets, a pure function
of the numbers: a held-out multiset of numbers never appears in training, with any target, whatever the seeds; each
split is deduplicated by (sorted numbers, target).

Problem dict: {"id", "question", "numbers", "target", "level", "ops", "answer"}: "question" states the numbers, the
target and the answer format; "answer" is a shortest solution; "ops" its number of operations.

solve_trace(problem, rng): a solver's search written out (try a step, check it, back off), ending in the answer line,
for a cold-start SFT model that searches; its length follows how much search it did.
"""
from __future__ import annotations

import hashlib
import random
import re
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction

from data import DataError, Example
from verifier.extract import THINK_OPEN, after_thought

MAX_ANSWER_CHARS = 200  # longer answer contents score 0 unread
MAX_DEPTH = 12  # parentheses nested deeper score 0
HELDOUT_PERCENT = 20
MAX_DRAWS = 20000  # draws for one problem before generate gives up (measured: ~5 at level 1, ~31 at level 5)


@dataclass(frozen=True)
class Level:
    count: int  # how many numbers are given
    ops: int  # operations in the shortest solution (ops + 1 numbers used; the rest are distractors)
    numbers: tuple[int, int]  # range of each number
    targets: tuple[int, int]  # range of the target


# Levels 1-3 draw small numbers, for the laptop-sized cold start (tools/tiny.py CountdownRecipe). Measured with
# bench/countdown_coldstart.py on an H100 (bench/results/countdown_coldstart_h100.jsonl), the same 1M-parameter model
# after 2,400 SFT steps of 32: greedy 0.39 / 0.14 at levels 1 / 2 with numbers 1-20 / 1-30, 0.35 / 0.10 with 1-10 /
# 1-15 (equal within 100 problems a level), but the small numbers' searches are shorter (median 376 against 483 tokens
# at level 2; 18 % against 43 % of samples past 640 tokens): each SFT and RL step costs less, and the longest searches
# fit the length limit. Level 1 at 1-10 has 1,000-2,000 distinct training problems.
LEVELS = {
    1: Level(3, 2, (1, 10), (10, 100)),  # all three numbers, two steps
    2: Level(4, 2, (1, 15), (10, 100)),  # two steps, one distractor
    3: Level(4, 3, (1, 20), (10, 200)),  # all four numbers
    4: Level(5, 3, (1, 50), (10, 500)),  # three steps, one distractor
    5: Level(5, 4, (1, 100), (100, 999)),  # all five numbers
}

# ------------------------------------------------------------------------------------------------
# Verifier: extract, tokenize, parse, evaluate exactly
# ------------------------------------------------------------------------------------------------
OPEN, CLOSE = "<answer>", "</answer>"
_OPS = {"+": "+", "-": "-", "*": "*", "/": "/", "×": "*", "÷": "/", "−": "-"}


class _Reject(Exception):
    """The equation is malformed, hostile or uses numbers it may not: reward 0."""


def extract_equation(completion: str) -> str | None:
    """Content of the last <answer>...</answer> pair, or None when there is none."""
    close = completion.rfind(CLOSE)
    start = completion.rfind(OPEN, 0, close) if close >= 0 else -1
    return None if start < 0 else completion[start + len(OPEN):close]


def tokenize(text: str, allowed: set[str]) -> list[str]:
    """Literals (as written), operators ('+-*/'), '(' and ')'. `allowed`: the given numbers' digits as text; a
    literal longer than the longest of them is refused before it is read to the end."""
    longest = max(map(len, allowed), default=0)
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c in " \t\r\n":
            i += 1
        elif c in "0123456789":
            j = i
            while j < n and text[j] in "0123456789":
                j += 1
                if j - i > longest:
                    raise _Reject("literal too long")
            if text[i:j] not in allowed:
                raise _Reject(f"{text[i:j]} is not a given number")
            out.append(text[i:j])
            i = j
        elif c in _OPS or c in "()":
            out.append(_OPS.get(c, c))
            i += 1
        else:
            raise _Reject(f"character {c!r}")
    return out


class _Parser:
    """expr := term (('+'|'-') term)* ; term := factor (('*'|'/') factor)* ; factor := literal | '(' expr ')'"""

    def __init__(self, tokens: list[str]):
        self.tokens, self.pos, self.depth = tokens, 0, 0
        self.used: list[int] = []  # the literals, in order

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def expr(self) -> Fraction:
        value = self.term()
        while self.peek() in ("+", "-"):
            op = self.tokens[self.pos]
            self.pos += 1
            rhs = self.term()
            value = value + rhs if op == "+" else value - rhs
        return value

    def term(self) -> Fraction:
        value = self.factor()
        while self.peek() in ("*", "/"):
            op = self.tokens[self.pos]
            self.pos += 1
            rhs = self.factor()
            if op == "/" and rhs == 0:
                raise _Reject("division by zero")
            value = value * rhs if op == "*" else value / rhs
        return value

    def factor(self) -> Fraction:
        tok = self.peek()
        self.pos += 1
        if tok == "(":
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise _Reject("nested too deep")
            value = self.expr()
            if self.peek() != ")":
                raise _Reject("unclosed parenthesis")
            self.pos += 1
            self.depth -= 1
            return value
        if tok is None or not tok.isdigit():  # an operator where a number belongs: '**', '//', unary signs, '()'
            raise _Reject(f"expected a number, got {tok!r}")
        self.used.append(int(tok))
        return Fraction(int(tok))


def evaluate(equation: str, numbers: list[int]) -> Fraction | None:
    """The exact value of `equation` under rules 2-6 (module docstring), or None when it breaks one."""
    try:
        equation = equation.strip(" \t\r\n")  # the whitespace tokenize skips: padding does not count toward the cap
        if len(equation) > MAX_ANSWER_CHARS:
            raise _Reject("too long")
        parser = _Parser(tokenize(equation, {str(x) for x in numbers}))
        value = parser.expr()
        if parser.pos != len(parser.tokens):
            raise _Reject("trailing tokens")
        if Counter(parser.used) - Counter(numbers):
            raise _Reject("a number used more often than given")
        return value
    except _Reject:
        return None


def countdown_reward(completion: str, problem: dict) -> float:
    """1.0 when the last <answer> equation reaches problem["target"] with problem["numbers"] (rules 1-7), else 0.0."""
    equation = extract_equation(completion)
    if equation is None:
        return 0.0
    value = evaluate(equation, problem["numbers"])
    return 1.0 if value is not None and value == problem["target"] else 0.0


class CountdownReward:
    """`--reward countdown`: the trainer's reward interface (as reward.MathReward's) over countdown_reward.

    Called with completions and their problems (Example.answer: the problem dict), it returns (rewards, correct,
    metrics). The answer is read after the thought as the math reward reads it (reward.py, "Thoughts": after the last
    `</think>`; a thought that never closes holds no answer), so `--template r1-zero`, a chat model's `<think>` and a
    prompt that opens the thought (thought_open) all meet one rule. No worker pool: the parser is bounded (rules
    1-2), so nothing can hang it."""

    def __init__(self, correct_reward: float = 1.0, wrong_reward: float = 0.0, thought_open: bool = False):
        self.correct_reward, self.wrong_reward, self.thought_open = correct_reward, wrong_reward, thought_open

    def __call__(self, completions: list[str], problems: list[dict], truncated: list[bool] | None = None):
        """truncated (the Completions' flags, as MathReward takes them) is not read: an answer needs its closing tag."""
        if len(completions) != len(problems):
            raise ValueError(f"{len(completions)} completions but {len(problems)} problems")
        correct = []
        for c, p in zip(completions, problems):
            text = after_thought(THINK_OPEN + c if self.thought_open else c)
            correct.append(text is not None and countdown_reward(text, p) == 1.0)
        return [self.correct_reward if ok else self.wrong_reward for ok in correct], correct, {"reward/timeouts": 0}


def countdown_task(n: int, split: str = "train", seed: int = 0, levels=(1, 2, 3, 4, 5)) -> list[Example]:
    """`--train-data builtin-countdown` (and --eval-data): `n` problems of generate() as Examples (prompt: the
    question; answer: the problem dict the reward needs; level; solution: one shortest equation)."""
    if split not in ("train", "test"):
        raise DataError(f"builtin-countdown task: split must be 'train' or 'test', got {split!r}")
    try:
        problems = generate(n, split=split, seed=seed, levels=levels)
    except ValueError as e:
        raise DataError(str(e)) from None
    return [Example(prompt=p["question"], answer=p, level=p["level"], solution=f"<answer>{p['answer']}</answer>",
                    meta={"kind": "countdown", "id": p["id"]}) for p in problems]


# ------------------------------------------------------------------------------------------------
# Exact solver over fractions
# ------------------------------------------------------------------------------------------------
# An expression is a tree: a leaf is the index of a given number, a node (op, left, right). A set of numbers is a
# bitmask of indices. Values are ints while they are whole (fast) and Fractions otherwise. Only values >= 0 are
# searched, and that loses no target >= 0: every expression over numbers >= 0 has a twin on the same numbers with
# the same operations whose every step is the absolute value of the original's (a - b with a < b becomes b - a,
# a + b of mixed signs the larger minus the smaller, |a * b| = |a| * |b|, ...). So the shortest solution found is
# the shortest over all rational expressions, and its steps never go negative (readable traces).
SMALL = 3  # subsets up to this size have every value they reach tabulated; larger ones are searched for a target


def _div(a, b):
    if type(a) is int and type(b) is int:
        return a // b if a % b == 0 else Fraction(a, b)
    q = a / b
    return q.numerator if q.denominator == 1 else q


def _combine(a, ta, b, tb):
    """Every (value, tree) one operation makes from two disjoint expressions of values a, b >= 0, all >= 0."""
    yield a + b, ("+", ta, tb)
    yield a * b, ("*", ta, tb)
    yield (a - b, ("-", ta, tb)) if a >= b else (b - a, ("-", tb, ta))
    if b != 0:
        yield _div(a, b), ("/", ta, tb)
    if a != 0:
        yield _div(b, a), ("/", tb, ta)


def _splits(mask: int):
    """Each unordered split of `mask` into two non-empty disjoint parts, once."""
    low = mask & -mask  # the part holding the lowest index is `sub`: each split once
    sub = (mask - 1) & mask
    while sub:
        if sub & low:
            yield sub, mask ^ sub
        sub = (sub - 1) & mask


def _tables(numbers: list[int], upto: int) -> dict[int, dict]:
    """mask -> {value: tree} for every subset of at most `upto` numbers, using each of its numbers once."""
    tables = {}
    masks = sorted(range(1, 1 << len(numbers)), key=lambda m: bin(m).count("1"))
    for mask in masks:
        if bin(mask).count("1") > upto:
            break
        if mask & (mask - 1) == 0:
            tables[mask] = {numbers[mask.bit_length() - 1]: mask.bit_length() - 1}
            continue
        table = {}
        for x, y in _splits(mask):
            for a, ta in tables[x].items():
                for b, tb in tables[y].items():
                    for v, t in _combine(a, ta, b, tb):
                        table.setdefault(v, t)
        tables[mask] = table
    return tables


def _find(mask: int, target, tables: dict):
    """A tree using each number of `mask` once with value `target`, or None. Large sets: for each split, every value
    b of the tabulated side gives the value a the other side must reach (a + b = t: a = t - b, ...). The case left
    out (b = 0 = t: a * b and b / a are 0 for any a) has a solution on fewer numbers, b's, which `shortest` finds
    first."""
    if mask in tables:
        return tables[mask].get(target)
    for x, y in _splits(mask):  # one side of every split is tabulated (shortest sizes the tables so)
        if x not in tables or (y in tables and len(tables[y]) < len(tables[x])):
            x, y = y, x  # x: the tabulated side with fewer values, enumerated; y: solved for its value
        for b, tb in tables[x].items():
            needs = [(target + b, lambda ta: ("-", ta, tb))]
            if target >= b:
                needs.append((target - b, lambda ta: ("+", ta, tb)))
            if b >= target:
                needs.append((b - target, lambda ta: ("-", tb, ta)))
            if b != 0:
                needs += [(_div(target, b), lambda ta: ("*", ta, tb)), (target * b, lambda ta: ("/", ta, tb))]
                if target != 0:
                    needs.append((_div(b, target), lambda ta: ("/", tb, ta)))
            for need, build in needs:
                ta = _find(y, need, tables)
                if ta is not None:
                    return build(ta)
    return None


def _size(tree) -> int:
    return 1 if isinstance(tree, int) else _size(tree[1]) + _size(tree[2])


def shortest(numbers: list[int], target: int, max_ops: int | None = None):
    """A tree with the fewest operations that reaches `target` (each number at most once), or None; with max_ops,
    None also when every solution needs more operations than that. Numbers and target >= 0 (the search above)."""
    if target < 0 or min(numbers) < 0 or len(numbers) > 2 * SMALL + 1:
        raise ValueError("countdown: the numbers and the target must be >= 0, and at most 7 numbers")
    n = len(numbers)
    largest = n if max_ops is None else min(n, max_ops + 1)  # the largest set searched; tabulate the sets below it
    tables = _tables(numbers, max(1, min(SMALL, largest - 1)))  # (>= half of it: a side of each split is tabulated)
    for size in range(1, largest + 1):
        for mask in range(1, 1 << n):
            if bin(mask).count("1") == size:
                tree = _find(mask, target, tables)
                if tree is not None:
                    return tree
    return None


_PREC = {"+": 1, "-": 1, "*": 2, "/": 2}


def to_text(tree, numbers: list[int]) -> str:
    """The tree as an equation with only the parentheses it needs: '(50 - 25) * 7 + 6'."""
    if isinstance(tree, int):
        return str(numbers[tree])
    op, left, right = tree
    ls, rs = to_text(left, numbers), to_text(right, numbers)
    if not isinstance(left, int) and _PREC[left[0]] < _PREC[op]:
        ls = f"({ls})"
    if not isinstance(right, int) and (_PREC[right[0]] < _PREC[op] or (_PREC[right[0]] == _PREC[op] and op in "-/")):
        rs = f"({rs})"
    return f"{ls} {op} {rs}"


def solve(numbers: list[int], target: int) -> str | None:
    """A shortest equation reaching `target` (each number at most once), or None when there is none."""
    tree = shortest(numbers, target)
    return None if tree is None else to_text(tree, numbers)


def _value(tree, numbers):
    """The exact value of a tree (numbers=None: the leaves are values themselves)."""
    if not isinstance(tree, tuple):
        return tree if numbers is None else numbers[tree]
    op, left, right = tree
    a, b = _value(left, numbers), _value(right, numbers)
    return a + b if op == "+" else a - b if op == "-" else a * b if op == "*" else _div(a, b)


# ------------------------------------------------------------------------------------------------
# Generator and splits
# ------------------------------------------------------------------------------------------------
def split_of(numbers: list[int]) -> str:
    """'test' for about HELDOUT_PERCENT% of all multisets of numbers, 'train' for the rest: a pure function."""
    key = ",".join(map(str, sorted(numbers)))
    return "test" if int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) % 100 < HELDOUT_PERCENT else "train"


def question(numbers: list[int], target: int) -> str:
    return (f"Using the numbers {numbers}, create an equation that equals {target}. You can use +, -, *, / and "
            f"parentheses, and each number at most once (you do not have to use them all). Give the final equation "
            f"alone, without \"= {target}\", in <answer> </answer> tags, for example <answer>(1 + 2) * 3</answer>.")


def make_problem(rng: random.Random, level: int, split: str | None = None) -> dict | None:
    """One problem of `level`, or None when this draw fails (a target out of range or reachable in fewer steps, or
    numbers of the other `split`): the caller draws again."""
    spec = LEVELS[level]
    numbers = [rng.randint(*spec.numbers) for _ in range(spec.count)]
    if split is not None and split_of(numbers) != split:
        return None
    items = [(numbers[i], i) for i in rng.sample(range(spec.count), spec.ops + 1)]
    while len(items) > 1:  # a random expression over ops + 1 of the numbers
        (a, ta), (b, tb) = items.pop(), items.pop()
        op = rng.choice("+-*/")
        if (op == "-" and a < b) or (op == "/" and a < b):  # larger first: no negative steps, fewer fractions
            (a, ta), (b, tb) = (b, tb), (a, ta)
        if op == "/" and b == 0:
            op = "*"
        items.append((_value((op, a, b), None), (op, ta, tb)))
        rng.shuffle(items)
    target, tree = items[0]
    if not (isinstance(target, int) and spec.targets[0] <= target <= spec.targets[1]):
        return None
    if shortest(numbers, target, max_ops=spec.ops - 1) is not None:
        return None  # a shorter solution exists: not this level
    key = f"{sorted(numbers)}={target}"
    return {"id": "countdown-" + hashlib.sha256(key.encode()).hexdigest()[:12], "question": question(numbers, target),
            "numbers": numbers, "target": target, "level": level, "ops": spec.ops, "answer": to_text(tree, numbers)}


def generate(n: int, split: str = "train", seed: int = 0, levels=(1, 2, 3, 4, 5), weights=None) -> list[dict]:
    """`n` distinct problems of `split` ('train' or 'test'), levels drawn with `weights` (uniform by default).
    Deterministic in (n, split, seed, levels, weights); the splits never share a multiset of numbers (split_of)."""
    if split not in ("train", "test"):
        raise ValueError(f"countdown: split must be 'train' or 'test', got {split!r}")
    rng = random.Random(f"countdown-{seed}-{split}")
    out, seen = [], set()
    while len(out) < n:
        level, p, tries = rng.choices(list(levels), weights=weights)[0], None, 0  # the level first, then draws
        while p is None or (tuple(sorted(p["numbers"])), p["target"]) in seen:  # until a new problem of it comes
            tries += 1
            if tries > MAX_DRAWS:  # the level's distinct problems are (nearly) used up
                raise ValueError(f"countdown: cannot draw {n} distinct {split} problems at levels {levels}; ask for fewer")
            p = make_problem(rng, level, split)
        seen.add((tuple(sorted(p["numbers"])), p["target"]))
        out.append(p)
    return out


# ------------------------------------------------------------------------------------------------
# Search traces for a cold-start SFT model
# ------------------------------------------------------------------------------------------------
def _show(v) -> str:
    return str(v) if isinstance(v, int) else f"{v.numerator}/{v.denominator}"


def _steps(items: list):
    """The steps a person tries on the current numbers, (i, j, value, tree): two of them, one operation, a whole
    result other than 0 (a larger number minus or divided by a smaller one)."""
    out = []
    for i in range(len(items)):
        for j in range(i + 1, len(items)):
            (a, ta), (b, tb) = items[i], items[j]
            out += [(i, j, v, t) for v, t in _combine(a, ta, b, tb) if isinstance(v, int) and v != 0]
    return out


SIDE_DEPTH = 3  # a side branch is followed at most this many steps before it is abandoned


def solve_trace(problem: dict, rng: random.Random, max_tries: int = 40) -> str:
    """The search for a solution written out: try a step on two of the numbers, check what is left, go deeper or
    back off, until a step reaches the target; the final line is the answer (`<answer>...</answer>`).

    A depth-first search that is sure to finish: at each depth of the shortest solution (`shortest`) it first tries
    0-4 other steps (how many is drawn from `rng`), each followed one or two ways up to SIDE_DEPTH steps deep, where
    two numbers left are checked at once ("Check 12, 234: 222, 246, 2808. No 242."), and abandoned ("Back to ..."),
    then takes the solution's step. A side branch that happens to reach the target ends the search there (a right
    answer too). After `max_tries` steps no more side branches are tried, which bounds the length. Lengths so vary
    with the luck of the draw and the problem's depth, as a model's searches do (characters, generate(200, "train",
    seed=11, levels=(L,)) searched with random.Random(11): level 1 132-540, median 213; level 5 254-2648, median 974;
    with max_tries 3, the cold start's: level 1 132-483, median 208; level 3 187-637, median 359)."""
    numbers, target = problem["numbers"], problem["target"]
    plan = shortest(numbers, target)
    if plan is None:
        raise ValueError(f"countdown: {numbers} cannot make {target}")
    wanted = []  # the solution's steps, innermost first

    def walk(t):
        if isinstance(t, tuple):
            walk(t[1]), walk(t[2])
            wanted.append(t)
    walk(plan)
    lines, tries = [f"Target {target} from {', '.join(map(str, numbers))}."], [0]

    def listing(items):
        return ", ".join(_show(v) for v, _ in items)

    def show(t):  # one step: '49 * 5 = 245'
        return f"{_show(_value(t[1], numbers))} {t[0]} {_show(_value(t[2], numbers))} = {_show(_value(t, numbers))}"

    def search(items, on_plan: bool, depth: int):
        steps = _steps(items)
        rng.shuffle(steps)
        if on_plan:  # the solution's next step, after k others
            have = {t: n for n, (_, t) in enumerate(items)}
            nxt = next(w for w in wanted if w not in have and w[1] in have and w[2] in have)
            i, j = have[nxt[1]], have[nxt[2]]
            others = [s for s in steps if s[3] != nxt and s[2] != _value(nxt, numbers)]
            k = rng.choice((0, 0, 0, 1, 1, 2, 3, 4)) if tries[0] < max_tries else 0
            order = [(s, False) for s in others[:k]] + [((i, j, _value(nxt, numbers), nxt), True)]
        elif len(items) == 2:  # two numbers left on a side branch: check every result at once
            tries[0] += 1
            hit = next((t for _, _, v, t in steps if v == target), None)
            if hit is not None:
                lines.append(f"Try {show(hit)}. That is the target.")
                return hit
            results = ", ".join(_show(v) for v in sorted({v for _, _, v, _ in steps}))
            lines.append(f"Check {listing(items)}: {results}. No {target}.")
            return None
        elif tries[0] < max_tries and depth < SIDE_DEPTH:  # a side branch: one or two ways on
            order = [(s, False) for s in steps[:rng.choice((1, 1, 2))]]
        else:
            order = []
        for (i, j, v, t), follows in order:
            tries[0] += 1
            rest = [x for n, x in enumerate(items) if n not in (i, j)] + [(v, t)]
            step = show(t)
            if v == target:
                lines.append(f"Try {step}. That is the target.")
                return t
            if len(rest) == 1:
                lines.append(f"Try {step}. Not {target}.")
                continue
            lines.append(f"Try {step}. Left: {listing(rest)}.")
            found = search(rest, follows, 0 if follows else depth + 1)
            if found is not None:
                return found
            lines.append(f"Back to {listing(items)}.")
        return None

    found = search([(x, i) for i, x in enumerate(numbers)], True, 0)
    equation = to_text(found, numbers)
    return "\n".join(lines + [f"So {equation} = {target}.", f"<answer>{equation}</answer>"])


RESULT_CAP = 2  # search_trace goes on from no step whose result is above RESULT_CAP x the target


def search_trace(problem: dict, rng: random.Random, max_chars: int | None = None, cut: bool = False) -> str | None:
    """A search with no knowledge of the solution, written out as solve_trace writes one: a depth-first search over
    the steps (two of the numbers, one operation, a whole result other than 0), tried in a random order (`rng`), each
    followed by what is left; two numbers left are checked at once ("Check 12, 5: 7, 17, 60. No 42."), a dead end
    goes back ("Back to ..."); the first step that makes the target ends the search. A step whose result is above
    RESULT_CAP x the target is not tried (a person aiming at 42 does not go on from 19 * 18 = 342); where that prunes
    every solution (about 1 problem in 100 at level 3) the search is written again without the cap. A step that
    leaves numbers the search has already searched (by another route, or the same step on equal numbers) is not
    written: the search remembers where it has been.

    Unlike solve_trace, every line follows from the lines before it: nothing in the text says which step is the
    solution's, so a model that imitates these searches cannot learn to expect the target after a few tries (the
    cold start trained on solve_trace's guided searches wrote the target as a wrongly computed result in 76-93 % of
    its claims: docs/countdown.md). That holds for the last two numbers too: they are always checked first, and the
    step that makes the target is written only after the list shows it ("Check 10, 2: 5, 8, 12, 20." then "Try 10 +
    2 = 12. That is the target."). Written as solve_trace writes them (a "Try" on two numbers only when one of
    their results is the target), the choice between "Try" and "Check" would say whether the target is reachable
    before any of it is computed, and every "Try" on two numbers would end in the target: the first build on these
    searches, written that way, got the arithmetic of 53 / 63 / 75 % of its claims wrong at levels 1 / 2 / 3 (the
    target written as the result), against 4 / 7 / 10 % of its other steps (bench/countdown_mechanism.py).
    The search is sure to end (every problem is solvable), but its length is the luck of the order: tokens of the
    cold start's tokenizer (CountdownRecipe().words()), generate(300, "train", seed=11, levels=(L,)) searched with
    random.Random(1) a level: level 1 median 143, at most 437; level 2 median 580, at most 4,091, 44 % within 480;
    level 3 median 800, at most 5,638, 31 % within 480. A better order than chance is what RL can learn (Stream of
    Search, Gandhi et al. 2024, trains on such searches the same way). With `max_chars`, a search whose text grows
    past it is abandoned: None, or with `cut` its whole lines that fit (no answer: the search as a length limit
    leaves it)."""
    numbers, target = problem["numbers"], problem["target"]
    written = [0]

    class _Long(Exception):
        pass

    def say(lines, line):
        if max_chars is not None and written[0] + len(line) + 1 > max_chars:
            raise _Long
        lines.append(line)
        written[0] += len(line) + 1

    def listing(items):
        return ", ".join(_show(v) for v, _ in items)

    def show(t):
        return f"{_show(_value(t[1], numbers))} {t[0]} {_show(_value(t[2], numbers))} = {_show(_value(t, numbers))}"

    def search(items, cap, lines):
        steps = _steps(items)
        if len(items) == 2:  # every result first; the step that makes the target only after the list shows it
            results = ", ".join(_show(v) for v in sorted({v for _, _, v, _ in steps}))
            hit = next((t for _, _, v, t in steps if v == target), None)
            if hit is None:
                say(lines, f"Check {listing(items)}: {results}. No {target}.")
                return None
            say(lines, f"Check {listing(items)}: {results}.")
            say(lines, f"Try {show(hit)}. That is the target.")
            return hit
        steps = [s for s in steps if cap is None or s[2] <= cap * target]
        rng.shuffle(steps)
        for i, j, v, t in steps:
            rest = [x for n, x in enumerate(items) if n not in (i, j)] + [(v, t)]
            if v == target:
                say(lines, f"Try {show(t)}. That is the target.")
                return t
            left = tuple(sorted(x for x, _ in rest))
            if left in seen:  # searched already (by another route, or the same step on equal numbers)
                continue
            seen.add(left)
            say(lines, f"Try {show(t)}. Left: {listing(rest)}.")
            found = search(rest, cap, lines)
            if found is not None:
                return found
            say(lines, f"Back to {listing(items)}.")
        return None

    for cap in (RESULT_CAP, None):
        lines, seen = [f"Target {target} from {', '.join(map(str, numbers))}."], set()
        written[0] = len(lines[0])
        try:
            found = search([(x, i) for i, x in enumerate(numbers)], cap, lines)
        except _Long:
            return "\n".join(lines) if cut else None
        if found is not None:
            equation = to_text(found, numbers)
            text = "\n".join(lines + [f"So {equation} = {target}.", f"<answer>{equation}</answer>"])
            if max_chars is not None and len(text) > max_chars:
                return "\n".join(lines) if cut else None
            return text
    raise ValueError(f"countdown: no search in whole steps makes {target} from {numbers}")


_TRY = re.compile(r"Try (\d+(?:/\d+)?) ([-+*/]) (\d+(?:/\d+)?) = (\d+(?:/\d+)?)\. (That is the target)?")
_CHECK = re.compile(r"Check (\d+), (\d+): ([\d, ]+)\.(?=( No |\nTry |\n|$))")


def check_trace(text: str, target: int) -> Counter:
    """Audit a search written in solve_trace's format (a model's, usually): how many of its steps' arithmetic is
    wrong, and how often it says "That is the target" of a result that is not. Counts: "steps" ("Try a op b = r."
    lines), "wrong_steps" (r is not a op b), "claims" ("That is the target" lines), "false_claims" (a claim whose
    line's arithmetic is wrong or whose true result is not the target), "checks" ("Check a, b: ..." lines),
    "wrong_checks" (the results listed are not exactly what solve_trace lists for a and b; a check line ends in
    "No <target>." or, in search_trace's searches, where the list holds the target, at its full stop); "steps,
    KIND" and "wrong steps, KIND" split the steps by operation (KIND "op +", "op -", "op *", "op /"), by the true
    result's size ("result <= 100", "result > 100") and by whether the line claims the target ("claim", "no
    claim"). A check's decision: "missed_targets" (a check that lists the target and says "No"), "check_hits" (a
    check followed by a "Try" line: search_trace's way of saying its list holds the target) and "unfounded_hits"
    (those whose list does not hold it). "repeats": "Try" lines written word for word earlier in the search (the
    same step on the same numbers: none of search_trace's, 0.1 % of solve_trace's with max_tries 3; generate(300,
    "train", seed=9) searched with random.Random(i) for the i-th problem). A step or result written as a fraction
    over 0 is a wrong step. A solver's trace has no wrong steps, false claims or wrong checks (tested); the verifier
    alone decides the reward."""
    n = Counter()
    tried = Counter(line for line in text.splitlines() if line.startswith("Try "))
    n["repeats"] = sum(k - 1 for k in tried.values())
    for m in _TRY.finditer(text):
        try:
            a, b, r = Fraction(m[1]), Fraction(m[3]), Fraction(m[4])
        except ZeroDivisionError:  # "3/0" written as a number
            a, b, r = Fraction(0), Fraction(0), None
        true = {"+": a + b, "-": a - b, "*": a * b, "/": a / b if b else None}[m[2]]
        n["steps"] += 1
        n["wrong_steps"] += true != r
        for kind in (f"op {m[2]}", "result > 100" if true is not None and true > 100 else "result <= 100",
                     "claim" if m[5] else "no claim"):
            n[f"steps, {kind}"] += 1
            n[f"wrong steps, {kind}"] += true != r
        if m[5]:
            n["claims"] += 1
            n["false_claims"] += true != r or true != target
    for m in _CHECK.finditer(text):
        a, b = int(m[1]), int(m[2])
        want = sorted({v for v, _ in _combine(a, None, b, None) if isinstance(v, int) and v != 0})
        listed = [int(x) for x in m[3].replace(" ", "").split(",") if x]
        n["checks"] += 1
        n["wrong_checks"] += listed != want
        if m[4] == " No ":  # the check says the target is not there
            n["missed_targets"] += target in listed
        elif m[4] == "\nTry ":  # it goes on to a step on these two numbers: the target is there
            n["check_hits"] += 1
            n["unfounded_hits"] += target not in listed
    return n


def attempts(problem: dict) -> list[tuple[str, tuple, bool]]:
    """Every whole attempt at `problem`: a chain of steps (_steps: two numbers, one operation, a whole result other
    than 0) until one number is left, as (its line, its tree, whether it makes the target). The line ends in the
    attempt's check, the target written beside the last result: "Try 9 - 6 = 3, 10 + 3 = 13. Target 25: no."
    Level 1 (three numbers, two steps; generate(300, "train", seed=11, levels=(1,))): 12-45 attempts a problem,
    median 30, of which 1-6 make the target (median 1): 6.0 % on average. An attempt uses every number, so the
    attempts of a problem with a distractor (levels 2 and 4) miss its shortest solutions: attempt_trace is for
    level 1."""
    numbers, target = problem["numbers"], problem["target"]

    def show(t):
        return f"{_show(_value(t[1], numbers))} {t[0]} {_show(_value(t[2], numbers))} = {_show(_value(t, numbers))}"

    out, seen = [], set()

    def chain(items, shown):
        for i, j, v, t in _steps(items):
            rest = [x for n, x in enumerate(items) if n not in (i, j)] + [(v, t)]
            if len(rest) > 1:
                chain(rest, shown + [show(t)])
                continue
            line = f"Try {', '.join(shown + [show(t)])}. Target {target}: {'yes' if v == target else 'no'}."
            if line not in seen:
                seen.add(line)
                out.append((line, t, v == target))

    chain([(x, i) for i, x in enumerate(numbers)], [])
    return out


def attempt_trace(problem: dict, rng: random.Random, max_attempts: int = 16, guided: float = 0.0) -> str | None:
    """A search by whole attempts, each checked where its result is written: attempts (above) in a random order, none
    twice, until one makes the target, then its equation:

        Target 25 from 6, 9, 10.
        Try 9 - 6 = 3, 10 + 3 = 13. Target 25: no.
        Try 6 + 10 = 16, 9 + 16 = 25. Target 25: yes.
        <answer>9 + 6 + 10</answer>

    The check sits beside its evidence. search_trace checks the last two numbers in a list ("Check 10, 3: 7, 13,
    30.") and decides at its end whether the list holds the target, a number written a whole search earlier; here the
    target is written next to the one result it is compared with, and the decision ("yes" or "no") follows them.
    Level 1, bench/countdown_decision.py: after 500 SFT steps the tiny model's list decision was p(holds) 0.63 where
    the list holds the target and 0.12 where not; after 800, p 0.965 / 0.014 in search_trace's form and p(yes) 0.92 /
    0.02 in this one (its "attempts-guided" trial): SFT length, more than the form, teaches the decision. This form's
    searches are whole two-step tries, 1-16 of them, on which GRPO learns which attempt to try (docs/countdown.md).

    With probability `guided` an attempt is drawn among the solutions not yet tried (the rest: among all attempts not
    yet tried), so that SFT on these shows solutions early more often than chance; 0 knows nothing of the solution,
    as search_trace. A search with no solution in `max_attempts` attempts is None (the caller draws again). Level 1
    (generate(300, "train", seed=11, levels=(1,)), random.Random(1), tokens of CountdownRecipe().words()): guided 0,
    16 attempts: 215 of 300 found, median 7 attempts, 187 tokens (42-418); guided 0.25, 8 attempts: 282 found,
    median 2 attempts, 78 tokens (42-239)."""
    numbers, target = problem["numbers"], problem["target"]
    left = attempts(problem)
    lines = [f"Target {target} from {', '.join(map(str, numbers))}."]
    for _ in range(max_attempts):
        if not left:  # every attempt tried (a problem whose solutions need a fraction or leave a number out)
            return None
        pool = [a for a in left if a[2]] if rng.random() < guided and any(a[2] for a in left) else left
        line, tree, hit = rng.choice(pool)
        left.remove((line, tree, hit))
        lines.append(line)
        if hit:
            return "\n".join(lines + [f"<answer>{to_text(tree, numbers)}</answer>"])
    return None


_ATTEMPT = re.compile(r"Try (.*?)\. Target (\d{1,9}): (yes|no)\.")
_STEP = re.compile(r"(\d{1,9}) ([-+*/]) (\d{1,9}) = (-?\d{1,9}(?:/\d{1,9})?)")


def _fraction(text: str) -> Fraction | None:
    """'7', '-3' or '3/2' as a Fraction; None for a zero denominator."""
    num, _, den = text.partition("/")
    return None if den and int(den) == 0 else Fraction(int(num), int(den or 1))


def check_attempts(text: str, target: int) -> Counter:
    """Audit a search written in attempt_trace's form, line by line: "attempts", "steps" and "wrong_steps" (r is not
    a op b), "hits" (attempts whose last written result is the target), "wrong_checks" (the target miswritten, or
    "yes" / "no" not what the written result and the target say), "claims" ("yes") and "false_claims" (a "yes" after
    a slip, or after a last result that is not the target), "missed" (a "no" after the target written as the result),
    "repeats" (an attempt's steps written earlier in the same search), "slipped_hits" (hits with a slip: the target
    written as a result the arithmetic does not give). Each step's arithmetic is checked, not which numbers it uses
    (whether the answer uses the given ones is the verifier's to say); a result may be written negative or as a
    fraction (a slip where it is not the step's value; over 0, always); numbers of more than 9 digits are not read.
    attempt_trace's searches have no slips (tested)."""
    n, seen = Counter(), set()
    for m in _ATTEMPT.finditer(text):
        n["attempts"] += 1
        steps, slips = _STEP.findall(m[1]), 0
        results = [_fraction(r) for _, _, _, r in steps]
        for (a, op, b, _), r in zip(steps, results):
            a, b = int(a), int(b)
            slips += r is None or {"+": a + b, "-": a - b, "*": a * b, "/": Fraction(a, b) if b else None}[op] != r
        n["steps"] += len(steps)
        n["wrong_steps"] += slips
        written = results[-1] if results else None
        n["hits"] += written == target
        n["slipped_hits"] += written == target and slips > 0
        n["wrong_checks"] += int(m[2]) != target or (m[3] == "yes") != (written == target)
        n["repeats"] += m[1] in seen
        seen.add(m[1])
        if m[3] == "yes":
            n["claims"] += 1
            n["false_claims"] += written != target or not steps or slips > 0
        elif written == target:
            n["missed"] += 1
    return n
