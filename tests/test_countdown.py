"""The Countdown task (tasks/countdown.py): verifier rules and hostile inputs, generator levels, splits, solver, traces.

Run:  python -m pytest -q tests/test_countdown.py
"""
import math
import os
import random
import time

import pytest

from data import DataError
from tasks import countdown as cd

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

P = {"numbers": [25, 3, 7, 50], "target": 181}  # no solution at all (cd.solve: None)


def r(answer: str, problem=P) -> float:
    return cd.countdown_reward(f"Let me think.\n<answer>{answer}</answer>", problem)


def test_hand_computed_correct():
    # 25 * 7 = 175, 175 + 3 = 178
    p = {"numbers": [25, 3, 7, 50], "target": 178}
    assert r("25 * 7 + 3", p) == 1.0
    assert r("3 + 7 * 25", p) == 1.0  # precedence: 7 * 25 first
    assert r("(25*7)+3", p) == 1.0 and r("  25  *7+ 3 ", p) == 1.0 and r("((25 * 7) + 3)", p) == 1.0
    assert r("25 × 7 + 3", p) == 1.0  # the printed multiplication sign is the same operation
    assert r("50 * 7 / 2", p) == 0.0  # 2 is not given
    q = {"numbers": [6, 4, 3], "target": 8}
    assert r("6 / 3 * 4", q) == 1.0 and r("6 ÷ 3 × 4", q) == 1.0 and r("4 * 6 / 3", q) == 1.0
    assert r("6 / (3 * 4)", q) == 0.0  # = 1/2
    assert r("6 − 3 + 4", {"numbers": [6, 4, 3], "target": 7}) == 1.0  # U+2212 minus
    f = {"numbers": [1, 3, 4, 6], "target": 24}  # the classic that needs a fraction: 6 / (1 - 3/4) = 24
    assert r("6 / (1 - 3 / 4)", f) == 1.0 and cd.solve([1, 3, 4, 6], 24) is not None
    assert r("(3 + 3) * 4", f) == 0.0  # 3 used twice
    assert r("(3 + 3) * 4", {"numbers": [3, 4, 3], "target": 24}) == 1.0  # ... fine when 3 is given twice
    assert r("25 + 3", P) == 0.0 and cd.solve(P["numbers"], 181) is None
    assert r("25", {"numbers": [25, 3], "target": 25}) == 1.0  # at most once: a lone given number that is the target


def test_unused_numbers_are_allowed():
    p = {"numbers": [2, 5, 9, 40], "target": 10}
    assert r("2 * 5", p) == 1.0 and r("40 / 2 - 9 - 5 + 4", p) == 0.0


def test_answer_format():
    p = {"numbers": [2, 5, 9], "target": 10}
    ok = "<answer>2 * 5</answer>"
    assert cd.countdown_reward(ok, p) == 1.0
    assert cd.countdown_reward("2 * 5", p) == 0.0  # no tags
    assert cd.countdown_reward("<answer>2 * 5", p) == 0.0  # never closed (cut off)
    assert cd.countdown_reward("<answer>9 + 2</answer> wait <answer>2 * 5</answer>", p) == 1.0  # the last pair
    assert cd.countdown_reward("<answer>2 * 5</answer> wait <answer>9 + 2</answer>", p) == 0.0
    assert cd.countdown_reward(ok + "\nSo that is my answer.\n", p) == 1.0  # text after the pair is not read
    assert cd.countdown_reward("<answer>\n2 *\n5\n</answer>", p) == 1.0  # multi-line content
    assert cd.countdown_reward("<answer></answer>", p) == 0.0
    assert cd.countdown_reward("<answer>2 * 5 = 10</answer>", p) == 0.0  # the equation alone, as the question says
    assert cd.countdown_reward("</answer>2 * 5<answer>", p) == 0.0
    assert cd.extract_equation("a <answer>x</answer> b <answer>y") == "x"


def test_whitespace_around_the_answer_does_not_count_toward_the_cap():
    # rule 2's cap guards against hostile lengths; padding around a right equation is not one
    p = {"numbers": [2, 5, 9], "target": 10}
    pad = " " * cd.MAX_ANSWER_CHARS + "\n" * cd.MAX_ANSWER_CHARS
    assert cd.countdown_reward(f"<answer>2 * 5{pad}</answer>", p) == 1.0
    assert cd.countdown_reward(f"<answer>{pad}2 * 5\r\n\t{pad}</answer>", p) == 1.0
    nines = [2, 5] + [9, 9] * 22
    long = "(" * 10 + "2 * 5" + ")" * 10 + " + 9 - 9" * 22  # right (= 10), but 1 character over the cap
    assert len(long) == cd.MAX_ANSWER_CHARS + 1 and cd.evaluate(long[:-8], nines) == 10  # one term less: read
    assert cd.countdown_reward(f"<answer>{pad}{long}{pad}</answer>", {"numbers": nines, "target": 10}) == 0.0


HOSTILE = [
    ("2 * 2 + 5", [2, 5, 9], 9),  # 2 used twice
    ("9 + 1", [2, 5, 9], 10),  # 1 not given
    ("5 / (2 - 2) + 9", [2, 5, 2, 9], 9),  # division by zero
    ("9 / (5 - 5)", [5, 5, 9], 0),
    ("2 ** 3 + 2", [2, 3, 2], 10),  # power: '**' is two operators
    ("2**3", [2, 3], 8),
    ("9 // 2 + 5", [9, 2, 5], 9),  # floor division
    ("9//2", [9, 2], 4),
    ("2.5 * 2", [2, 5, 2], 5),  # a decimal is not 2 and 5
    ("2.5*2", [2, 5, 2], 5),
    ("x * 5", [2, 5], 10), ("abs(5) * 2", [2, 5], 10), ("__import__('os')", [2, 5], 10),  # names
    ("-5 + 15", [5, 15], 10), ("+5 + 5", [5, 5], 10), ("15 - -5", [5, 15], 20), ("+-+5 - 1", [5, 1], -6),  # signs
    ("5 * 2 = 10", [5, 2], 10), ("5, 2", [5, 2], 10), ("(5 * 2", [5, 2], 10), ("5 * 2)", [5, 2], 10),
    ("()", [5, 2], 10), ("5 2", [5, 2], 10), ("5 (2)", [5, 2], 10), ("05 * 2", [5, 2], 10),
    ("1e1", [1], 10), ("0x0a", [0], 10), ("5 ^ 2", [5, 2], 7), ("5 % 2", [5, 2], 1), ("5 & 2", [5, 2], 0),
    ("10" + "0" * 5000, [10], 10), ("9" * 10 ** 5, [9], 9),  # huge literals
]


@pytest.mark.parametrize("eq,numbers,target", HOSTILE)
def test_hostile_and_malformed_score_zero(eq, numbers, target):
    assert r(eq, {"numbers": numbers, "target": target}) == 0.0


def test_hostile_are_fast():
    p = {"numbers": [9, 9, 9], "target": 9}
    probes = ["9**9**9", "9" * 10 ** 6, "(" * 10 ** 5 + "9" + ")" * 10 ** 5, "(" * 13 + "9" + ")" * 13,
              "9+" * 500_000 + "9", "<answer>" * 120_000, "x" * 10 ** 6]
    for probe in probes:
        for text in (f"<answer>{probe}</answer>", probe + "</answer>", "<answer>" + probe, probe):
            t = time.perf_counter()
            assert cd.countdown_reward(text, p) == 0.0
            assert time.perf_counter() - t < 0.05, probe[:20]
    assert r("(" * 12 + "9" + ")" * 12, p) == 1.0  # MAX_DEPTH itself is allowed
    assert r("(" * 13 + "9" + ")" * 13, p) == 0.0


def test_exact_not_float():
    assert r("(2 / 8 + 6) * 4", {"numbers": [2, 4, 6, 8], "target": 25}) == 1.0  # a fraction on the way: exact
    assert cd.evaluate("1 / 3 + 1 / 7", [1, 3, 1, 7]) == cd.Fraction(10, 21)
    # 1000 / 999 - 1 / 1000 = 999001 / 999000, 1e-6 from 1: the peers' |v - target| < 1e-5 accepts it, exact does not
    p = {"numbers": [1000, 999, 1, 1000], "target": 1}
    assert abs(1000 / 999 - 1 / 1000 - 1) < 1e-5 and r("1000 / 999 - 1 / 1000", p) == 0.0


@pytest.mark.parametrize("level", sorted(cd.LEVELS))
def test_every_generated_problem_is_solvable_at_its_level(level):
    spec = cd.LEVELS[level]
    for p in cd.generate(25, "train", seed=1, levels=(level,)) + cd.generate(8, "test", seed=1, levels=(level,)):
        assert set(p) == {"id", "question", "numbers", "target", "level", "ops", "answer"}
        assert p["level"] == level and p["ops"] == spec.ops and len(p["numbers"]) == spec.count
        assert all(spec.numbers[0] <= x <= spec.numbers[1] for x in p["numbers"])
        assert spec.targets[0] <= p["target"] <= spec.targets[1] and p["target"] not in p["numbers"]
        assert f"{p['numbers']}" in p["question"] and str(p["target"]) in p["question"] and "<answer>" in p["question"]
        solution = cd.solve(p["numbers"], p["target"])
        assert r(solution, p) == 1.0 and r(p["answer"], p) == 1.0
        assert cd._size(cd.shortest(p["numbers"], p["target"])) - 1 == spec.ops  # the shortest has the level's length
        assert cd.shortest(p["numbers"], p["target"], max_ops=spec.ops - 1) is None


def test_solver_hand_checked():
    assert cd.solve([2, 5, 9], 10) in ("2 * 5", "5 * 2")
    assert cd.solve([2, 5, 9], 9) == "9"
    assert cd.solve([1, 1, 1], 100) is None  # (1 + 1) * ... at most 3
    assert cd.solve([4, 4], 1) == "4 / 4"
    assert cd.solve([3, 3, 8, 8], 24) in ("3 * 8", "8 * 3")  # at most once: the shortest, not 8 / (3 - 8 / 3)
    assert cd._size(cd.shortest([2, 3, 7], 23)) == 3  # 3 * 7 + 2: no pair makes 23
    assert r(cd.solve([3, 3, 8], 72), {"numbers": [3, 3, 8], "target": 72}) == 1.0  # 3 * 3 * 8
    assert cd.to_text(("-", 0, ("-", 1, 2)), [9, 5, 2]) == "9 - (5 - 2)"
    assert cd.to_text(("/", ("+", 0, 1), ("*", 1, 2)), [9, 5, 2]) == "(9 + 5) / (5 * 2)"
    assert cd.to_text(("+", 0, ("+", 1, 2)), [9, 5, 2]) == "9 + 5 + 2"


def test_deterministic_and_splits_disjoint():
    a, b = cd.generate(40, seed=3), cd.generate(40, seed=3)
    assert a == b and a != cd.generate(40, seed=4)
    assert len({p["level"] for p in a}) == 5
    train = cd.generate(200, "train", seed=0, levels=(1, 2)) + cd.generate(200, "train", seed=7, levels=(1, 2))
    test = cd.generate(100, "test", seed=0, levels=(1, 2)) + cd.generate(100, "test", seed=7, levels=(1, 2))
    key = lambda p: tuple(sorted(p["numbers"]))  # noqa: E731
    assert not {key(p) for p in train} & {key(p) for p in test}  # not even the numbers, with any target
    assert all(cd.split_of(p["numbers"]) == "test" for p in test)
    for split in (test[:100], test[100:], train[:200], train[200:]):  # one generate() call each
        keys = [(key(p), p["target"]) for p in split]
        assert len(set(keys)) == len(keys) and len({p["id"] for p in split}) == len(split)
    with pytest.raises(ValueError):
        cd.generate(3, "validation")


def test_solve_trace():
    """Every step a trace shows is right arithmetic, its last line is the answer, and it scores 1; deterministic in
    the rng; the length grows with the search (at least 3x between the shortest and longest trace of a level)."""
    import operator
    import re
    from fractions import Fraction

    apply = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv}
    num = r"(\d+(?:/\d+)?)"
    for level in (1, 3, 5):
        problems = cd.generate(60, "train", seed=2, levels=(level,))
        rng = random.Random(0)
        traces = [cd.solve_trace(p, rng) for p in problems]
        rng = random.Random(0)
        assert traces == [cd.solve_trace(p, rng) for p in problems]
        for p, trace in zip(problems, traces):
            assert cd.countdown_reward(trace, p) == 1.0
            lines = trace.splitlines()
            assert lines[-1].startswith("<answer>") and lines[-1].endswith("</answer>")
            assert lines[0] == f"Target {p['target']} from {', '.join(map(str, p['numbers']))}."
            steps = re.findall(rf"Try {num} ([-+*/]) {num} = {num}\.", trace)
            assert steps and len(steps) == trace.count("Try ")
            for a, op, b, v in steps:
                assert apply[op](Fraction(a), Fraction(b)) == Fraction(v)
            for x, y, results in re.findall(rf"Check {num}, {num}: ([\d, ]+)\. No", trace):
                assert str(p["target"]) not in results.split(", ")
                assert str(Fraction(x) + Fraction(y)) in results.split(", ")
        lengths = sorted(map(len, traces))
        assert lengths[-1] >= 3 * lengths[0]


def test_search_trace():
    """search_trace's searches: no slip anywhere (check_trace), the answer scores 1, deterministic in the rng; a
    different rng tries another order (no path is fixed by the solution); steps above RESULT_CAP x the target are
    not gone on from unless the capped search failed; max_chars abandons a longer search (None) and otherwise
    changes nothing; lengths spread ten-fold and more at levels 2-3."""
    import re

    for level in (1, 2, 3):
        problems = cd.generate(60, "train", seed=4, levels=(level,))
        traces = [cd.search_trace(p, random.Random(i)) for i, p in enumerate(problems)]
        assert traces == [cd.search_trace(p, random.Random(i)) for i, p in enumerate(problems)]
        other = [cd.search_trace(p, random.Random(i + 1000)) for i, p in enumerate(problems)]
        assert sum(a != b for a, b in zip(traces, other)) >= 30
        over = 0
        for p, trace in zip(problems, traces):
            assert cd.countdown_reward(trace, p) == 1.0
            audit = cd.check_trace(trace, p["target"])
            assert audit["claims"] == 1 and audit["wrong_steps"] == audit["false_claims"] == audit["wrong_checks"] == 0
            lines = trace.splitlines()
            assert lines[0] == f"Target {p['target']} from {', '.join(map(str, p['numbers']))}."
            assert lines[-1].startswith("<answer>") and "That is the target." in lines[-3]
            assert audit["missed_targets"] == audit["unfounded_hits"] == 0 and audit["check_hits"] == lines[-4].startswith("Check")
            assert audit["repeats"] == 0 and len({line for line in lines if line.startswith("Try ")}) == audit["steps"]
            if lines[-4].startswith("Check "):  # two numbers left: the list shows the target before the step is written
                assert str(p["target"]) in lines[-4].split(": ")[1].rstrip(".").split(", ")
                assert not lines[-4].endswith(f"No {p['target']}.")
            for i, line in enumerate(lines):  # every "Try" on two numbers follows its check
                if line.startswith("Try ") and i and lines[i - 1].startswith("Check "):
                    assert line.endswith("That is the target.") and i == len(lines) - 3
            results = [int(r) for r in re.findall(r"= (\d+)\. Left:", trace)]
            over += any(r > cd.RESULT_CAP * p["target"] for r in results)
            for i, line in enumerate(lines):  # a dead end goes back to a listing the search has written before
                if line.startswith("Back to "):
                    assert any(line[len("Back to "):] in prev for prev in lines[:i])
            short = cd.search_trace(p, random.Random(7), max_chars=len(trace) // 2)
            assert short is None or len(short) <= len(trace) // 2
            assert cd.search_trace(p, random.Random(7), max_chars=10**6) == cd.search_trace(p, random.Random(7))
        assert over <= 2
        lengths = sorted(map(len, traces))
        assert lengths[-1] >= (4 if level == 1 else 10) * lengths[0]


def test_attempt_trace():
    """attempt_trace's searches: every attempt whole (each number once), none twice, each check right (check_attempts:
    no slips), exactly one "yes", on the last attempt, and its equation scores 1; deterministic in the rng, another rng
    another order; attempts() holds every chain of steps, and its solutions are exactly those that make the target;
    guided 1 writes a solution first, max_attempts bounds the search (None past it)."""
    import re

    nones = 0
    for p in cd.generate(40, "train", seed=6, levels=(1,)):
        al = cd.attempts(p)
        assert any(hit for _, _, hit in al) and 12 <= len(al) <= 60
        assert all(cd.evaluate(cd.to_text(t, p["numbers"]), p["numbers"]) == p["target"] for _, t, hit in al if hit)
        assert all(cd.evaluate(cd.to_text(t, p["numbers"]), p["numbers"]) != p["target"] for _, t, hit in al if not hit)
        assert all(sorted(int(x) for x in re.findall(r"\d+", cd.to_text(t, p["numbers"]))) == sorted(p["numbers"])
                   for _, t, _ in al)  # each number once
        for i in range(5):
            text = cd.attempt_trace(p, random.Random(i), max_attempts=len(al))
            assert text == cd.attempt_trace(p, random.Random(i), max_attempts=len(al)) and cd.countdown_reward(text, p) == 1
            lines = text.splitlines()
            assert lines[0] == f"Target {p['target']} from {', '.join(map(str, p['numbers']))}." and lines[-1].startswith("<answer>")
            n = cd.check_attempts(text, p["target"])
            assert n["attempts"] == len(lines) - 2 and n["claims"] == n["hits"] == 1 and lines[-2].endswith(": yes.")
            assert n["wrong_steps"] == n["wrong_checks"] == n["false_claims"] == n["missed"] == n["repeats"] == 0
        assert len(cd.attempt_trace(p, random.Random(0), guided=1.0).splitlines()) == 3  # a solution at once
        short = [cd.attempt_trace(p, random.Random(i), max_attempts=1) for i in range(8)]
        assert all(t is None or t.count("Try ") == 1 for t in short)
        nones += short.count(None)
    assert nones > 200  # one attempt rarely finds the target
    assert cd.attempt_trace({"numbers": [3, 3, 8, 8], "target": 24}, random.Random(0), max_attempts=10**4) is None
    orders = {cd.attempt_trace(p, random.Random(i), max_attempts=99).splitlines()[1] for i in range(8)
              for p in cd.generate(1, "train", seed=6, levels=(1,))}
    assert len(orders) > 1


def test_check_attempts():
    """check_attempts counts hand-made lines exactly: slips, wrong checks, false claims, misses, repeats, slipped hits."""
    text = ("Try 9 - 6 = 3, 10 + 3 = 13. Target 25: no.\n"  # right
            "Try 6 + 10 = 16, 9 + 16 = 24. Target 25: no.\n"  # a slip (25), checked right against what is written
            "Try 6 + 10 = 16, 9 + 16 = 25. Target 25: yes.\n"  # right, a true claim
            "Try 9 * 2 = 18, 7 + 18 = 25. Target 23: yes.\n"  # the target miswritten (a wrong check), a true claim
            "Try 6 * 9 = 54, 54 - 10 = 25. Target 25: yes.\n"  # a slip written as the target: a false claim
            "Try 9 - 6 = 3, 10 + 3 = 13. Target 25: yes.\n"  # a repeat, a wrong check, a false claim
            "Try 10 / 5 = 2, 2 + 23 = 25. Target 25: no.")  # right, the target missed (a wrong check)
    n = cd.check_attempts(text, 25)
    assert (n["attempts"], n["steps"], n["wrong_steps"], n["hits"]) == (7, 14, 2, 4)
    assert (n["claims"], n["false_claims"], n["wrong_checks"], n["missed"], n["repeats"]) == (4, 2, 3, 1, 1)
    assert n["slipped_hits"] == 1  # 54 - 10 = 25: the target written where the step gives 44
    assert cd.check_attempts("Try 7 / 0 = 3. Target 3: yes.", 3)["false_claims"] == 1
    odd = cd.check_attempts("Try 9 - 12 = -3, 2 * 4 = 8. Target 8: yes.\nTry 3 / 2 = 3/2, 4 * 3/2 = 6. Target 6: yes.\n"
                            "Try 7 / 2 = 3/0. Target 3: no.\nTry . Target 5: yes.\nTry 1 + 1 = 2" + "9" * 5000, 8)
    assert (odd["attempts"], odd["steps"], odd["wrong_steps"], odd["claims"], odd["false_claims"]) == (4, 4, 1, 3, 2)
    assert cd.check_attempts("", 5) == cd.Counter()


def _brute_min_ops(numbers):
    """value -> fewest operations, by trying every pair and every operation (negative steps too) on Fractions:
    independent of the solver's tables, tricks and non-negative search."""
    from fractions import Fraction

    best = {}

    def go(items, ops):
        for v in items:
            best[v] = min(best.get(v, ops), ops)
        for i in range(len(items)):  # each value seen counts: the numbers not in it are left out ("at most once")
            for j in range(i + 1, len(items)):
                a, b = items[i], items[j]
                rest = [x for k, x in enumerate(items) if k not in (i, j)]
                for v in {a + b, a - b, b - a, a * b} | ({a / b} if b else set()) | ({b / a} if a else set()):
                    go(rest + [v], ops + 1)

    go([Fraction(x) for x in numbers], 0)
    return best


def test_check_trace():
    """check_trace audits a search line by line: a solver's traces have no slips; hand-made lines are counted exactly."""
    total = cd.Counter()
    for level in (1, 2, 3):
        for p in cd.generate(60, seed=3, levels=(level,)):
            total += cd.check_trace(cd.solve_trace(p, random.Random(1), max_tries=3), p["target"])
    assert total["steps"] > 500 and total["claims"] == 180 and total["checks"] > 100
    assert total["wrong_steps"] == total["false_claims"] == total["wrong_checks"] == total["missed_targets"] == 0
    text = ("Try 3 + 4 = 8. Left: 8, 2.\n"  # wrong arithmetic
            "Try 8 * 2 = 16. That is the target.\n"  # right arithmetic, not the target (6): a false claim
            "Try 9 - 2 = 6. That is the target.\n"  # wrong arithmetic (9 - 2 = 7) and a false claim
            "Try 12 / 2 = 6. That is the target.\n"  # right
            "Check 3, 6: 2, 3, 9, 18. No 5.\n"  # right: 9, 18, 3, 6 / 3 (3 / 6 is not whole)
            "Check 4, 4: 1, 8, 16. No 5.\n"  # right: 4 - 4 = 0 is not listed, 4 / 4 = 1 once
            "Check 2, 5: 3, 7. No 6.")  # wrong: 2 * 5 = 10 missing
    n = cd.check_trace(text, 6)
    assert (n["steps"], n["wrong_steps"], n["claims"], n["false_claims"]) == (4, 2, 3, 2)
    assert (n["checks"], n["wrong_checks"]) == (3, 1)
    assert (n["steps, op +"], n["wrong steps, op +"], n["steps, op -"], n["wrong steps, op -"]) == (1, 1, 1, 1)
    assert (n["steps, op *"], n["wrong steps, op *"], n["steps, op /"], n["wrong steps, op /"]) == (1, 0, 1, 0)
    assert (n["steps, result <= 100"], n["wrong steps, result <= 100"], n["steps, result > 100"]) == (4, 2, 0)
    assert (n["steps, claim"], n["wrong steps, claim"], n["steps, no claim"], n["wrong steps, no claim"]) == (3, 1, 1, 1)
    assert cd.check_trace("Try 12 * 11 = 132. Left: 3.\nTry 20 * 7 = 104. Left: 1.", 5)["wrong steps, result > 100"] == 1
    zero = cd.check_trace("Try 3/0 + 1 = 4. Left: 4.\nTry 6 / 0 = 2. That is the target.\nTry 1 + 1 = 2/0. Left: 2.", 2)
    assert (zero["steps"], zero["wrong_steps"], zero["claims"], zero["false_claims"]) == (3, 3, 1, 1)
    assert n["repeats"] == 0
    # search_trace's two numbers that make the target: the check ends at its full stop, the claim follows
    hit = cd.check_trace("Check 10, 2: 5, 8, 12, 20.\nTry 10 + 2 = 12. That is the target.\nCheck 3, 4: 1, 12.", 12)
    assert (hit["checks"], hit["wrong_checks"], hit["claims"], hit["false_claims"]) == (2, 1, 1, 0)  # 3 + 4 = 7 missing
    assert (hit["check_hits"], hit["unfounded_hits"], hit["missed_targets"]) == (1, 0, 0)
    said = cd.check_trace("Check 7, 3: 4, 10, 21. No 21.\nCheck 4, 4: 1, 8, 16.\nTry 4 * 4 = 14. That is the target.", 21)
    assert (said["missed_targets"], said["check_hits"], said["unfounded_hits"], said["false_claims"]) == (1, 1, 1, 1)
    loop = "Try 2 + 3 = 5. Left: 5, 4.\nCheck 5, 4: 1, 9, 20. No 7.\nBack to 2, 3, 4.\nTry 2 + 3 = 5. Left: 5, 4.\n" * 2
    assert cd.check_trace(loop, 7)["repeats"] == 3


def test_solver_matches_brute_force():
    rng = random.Random(9)
    for _ in range(8):
        numbers = [rng.randint(0, 12) for _ in range(4)]
        best = _brute_min_ops(numbers)
        reachable = sorted(v for v in best if v >= 0 and v.denominator == 1)
        for t in rng.sample(reachable, 20) + rng.sample(range(150), 20):
            tree = cd.shortest(numbers, t)
            assert (None if tree is None else cd._size(tree) - 1) == best.get(t), (numbers, t)
            assert tree is None or cd.evaluate(cd.to_text(tree, numbers), numbers) == t


# ---- the task in train.py and evaluate.py: --reward countdown, --train-data / --eval-data builtin-countdown ----------
def test_generate_draws_every_level_alike():
    """The level is drawn first and kept until a problem of it is found: harder levels, whose draws fail more often,
    are not under-represented (uniform weights: each of 5 levels near 1/5 of 500)."""
    from collections import Counter

    counts = Counter(p["level"] for p in cd.generate(500, seed=4))
    assert set(counts) == {1, 2, 3, 4, 5} and all(70 <= c <= 130 for c in counts.values()), counts


def test_builtin_countdown_loads_as_examples():
    from tasks.load import load_dataset

    train = load_dataset("builtin-countdown", "train", n=30, seed=1)
    test = load_dataset("builtin", "test", n=30, seed=1, schema="countdown")  # 'builtin' of the countdown reward
    assert len(train) == len(test) == 30
    assert all(e.prompt == e.answer["question"] and e.level == e.answer["level"] for e in train + test)
    assert all(cd.countdown_reward(e.solution, e.answer) == 1.0 for e in train + test)  # the stored shortest equation
    assert not {tuple(sorted(e.answer["numbers"])) for e in train} & {tuple(sorted(e.answer["numbers"])) for e in test}
    with pytest.raises(DataError, match="built-in task only"):
        load_dataset("some/hub-dataset", "train", schema="countdown")
    assert {e.level for e in load_dataset("builtin-countdown", "train", n=60, seed=1)} == {1}  # COUNTDOWN_LEVELS
    assert {e.level for e in load_dataset("builtin-countdown:1,2,3", "train", n=60, seed=1)} == {1, 2, 3}
    assert {e.level for e in load_dataset("builtin-countdown:1", "test", n=40, seed=1)} == {1}
    assert {e.level for e in load_dataset("builtin-countdown:2,4", "train", n=40, seed=1)} == {2, 4}
    for bad in ("builtin-countdown:", "builtin-countdown:6", "builtin-countdown:\u00b2", "builtin-countdown:1,1", "builtin-countdown:x",
                "builtin-countdown:1,,2"):
        with pytest.raises(DataError, match="builtin-countdown's levels"):
            load_dataset(bad, "train", n=5)
    assert len(load_dataset("builtin-countdown:1", "train")) == len(load_dataset("builtin-countdown", "train")) == 1000  # of 1,250
    with pytest.raises(DataError, match="built-in task only"):  # not a level list: not the built-in task
        load_dataset("builtin-countdown1", "train", n=5, schema="countdown")


def test_countdown_reward_interface_and_thoughts():
    p = {"numbers": [3, 7, 25], "target": 46}
    r = cd.CountdownReward(1.0, -1.0)
    rewards, correct, metrics = r(["try 25 + 7 = 32, no. <answer>25 + 7 * 3</answer>", "<answer>25 + 7</answer>",
                                   "<think>25 + 7 * 3</think> no answer", "<think><answer>25 + 7 * 3</answer>"],
                                  [p] * 4)
    assert rewards == [1.0, -1.0, -1.0, -1.0] and correct == [True, False, False, False] and metrics["reward/timeouts"] == 0
    opened = cd.CountdownReward(thought_open=True)  # the prompt opened the thought: the answer comes after </think>
    assert opened(["search ... </think> <answer>25 + 7 * 3</answer>", "<answer>25 + 7 * 3</answer>"], [p] * 2)[1] == [True, False]
    with pytest.raises(ValueError):
        r(["x"], [p, p])


def test_countdown_prompts_and_flags():
    import config
    from tasks.templates import build_prompt, check_template
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(os.path.join(ROOT, "models", "tiny-qwen2"))
    q = cd.question([3, 7, 25], 46)
    prompt = build_prompt(tok, q, "countdown", "plain")
    assert "\\boxed" not in prompt and q in prompt and prompt.endswith("\nAnswer: ")
    assert "\\boxed" in build_prompt(tok, q, "math", "plain")  # the math prompt unchanged
    with pytest.raises(SystemExit, match="qwen-math"):
        check_template(tok, "qwen-math", "countdown")
    cfg = config.parse_config(["--reward", "countdown"])
    assert cfg.reward == "countdown" and cfg.train_data == "builtin"
    assert (cfg.max_new_tokens, cfg.eval_problems, cfg.batch_size, cfg.mini_batch_size, cfg.max_steps, cfg.lr) == (
        128, 200, 128, 128, 200, 3e-4)  # the Countdown defaults (config.COUNTDOWN), the lr x COUNTDOWN_LR_SCALE
    cfg = config.parse_config(["--train-data", "builtin-countdown"])  # the task named: its reward follows
    assert cfg.reward == "countdown" and cfg.max_new_tokens == 128 and cfg.eval_data == "builtin"
    assert config.parse_config(["--reward", "countdown", "--max-new-tokens", "300"]).max_new_tokens == 300  # given wins
    dapo = config.parse_config(["--train-data", "builtin-countdown", "--recipe", "dapo"])  # 16 of 64 -> 32 of 128
    assert dapo.overlong_buffer == 32 and config.parse_config(["--recipe", "dapo"]).overlong_buffer == 16
    assert (dapo.lr, dapo.batch_size // dapo.mini_batch_size) == (3e-4, 16)  # mu 16 kept in the smaller batch
    assert config.parse_config(["--train-data", "builtin-countdown", "--recipe", "cispo"]).lr == 7.5e-5
    assert config.parse_config(["--train-data", "builtin-countdown", "--lr", "1e-4"]).lr == 1e-4  # given wins
    c3po = config.parse_config(["--reward", "countdown", "--recipe", "c3po"])  # one task: no math -> code stages
    assert c3po.stages == "" and c3po.token_budget == 4096 * 2
    one = config.parse_config(["--train-data", "builtin-countdown:1"])  # levels named: the held-out set has them too
    assert (one.reward, one.max_new_tokens, one.eval_data) == ("countdown", 128, "builtin-countdown:1")
    assert config.parse_config(["--train-data", "builtin-countdown:1", "--eval-data", "builtin-countdown"]).eval_data == "builtin-countdown"
    assert config.parse_config(["--train-data", "builtin-countdown:1", "--eval-data", "builtin"]).eval_data == "builtin"
    for argv in (["--reward", "countdown", "--train-data", "builtin-math"], ["--eval-data", "builtin-countdown"],
                 ["--eval-data", "builtin-countdown:1"]):
        with pytest.raises(SystemExit, match="does not go with --reward"):
            config.parse_config(argv)


def test_generate_gives_up_when_a_level_is_used_up(monkeypatch):
    """A level whose distinct problems are used up ends in one ValueError after MAX_DRAWS draws for one problem,
    not in hours of redrawing duplicates."""
    rng, same = random.Random(0), None
    while same is None:
        same = cd.make_problem(rng, 1)
    monkeypatch.setattr(cd, "make_problem", lambda rng, level, split=None: dict(same))
    monkeypatch.setattr(cd, "MAX_DRAWS", 50)
    with pytest.raises(ValueError, match="ask for fewer"):
        cd.generate(2, levels=(1,))


def test_coldstart_bench_dry_run(tmp_path):
    """bench/countdown_coldstart.py --dry-run: two tiny candidates SFT'd and measured on the CPU, one row each."""
    import json
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "bench/countdown_coldstart.py", "--dry-run", "--out", str(tmp_path)], cwd=ROOT,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [json.loads(line) for line in open(tmp_path / "countdown_coldstart.jsonl")]
    assert sorted(x["name"] for x in rows) == ["dry-a", "dry-b"] and not any("error" in x for x in rows)
    for x in rows:
        assert set(x["levels"]) == {"1", "2", "3"} and all(0 <= v["greedy"] <= 1 and v["nll"] > 0 and 0 <= v["wrong_steps"] <= 1
                                                           for v in x["levels"].values())
    assert (tmp_path / "countdown_coldstart.md").read_text().count("| dry-") == 2


def test_mechanism_bench_runs_on_a_model(tmp_path):
    """bench/countdown_mechanism.py audits a model's searches: one row a level with every outcome's share summing to 1;
    a directory without a model is one error line."""
    import json
    import subprocess
    import sys

    from tools import tiny

    recipe = tiny.CountdownRecipe(hidden=32, layers=1, intermediate=64)
    tok = tiny.build_tokenizer(recipe.words(), recipe.positions)
    tiny.build_model(recipe, tok).save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    r = subprocess.run([sys.executable, "bench/countdown_mechanism.py", str(tmp_path / "m"), "--problems", "3",
                        "--samples", "2", "--max-new-tokens", "16"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    assert [x["level"] for x in rows] == [1, 2, 3]
    for x in rows:
        assert abs(sum(x[k] for k in ("correct", "no answer", "rejected answer", "wrong, slip in search",
                                      "wrong, no slip")) - 1) < 1e-9
        assert x["nll"] > 0 and x["length"] <= 16
        d = x["decision_given_the_search"]  # the random model's, on the searches of the level's 3 problems
        assert d["checks_holding"] >= 1 and d["checks_not_holding"] >= 1
        assert 0 <= d["p_holds_when_it_does"] <= 1 and 0 <= d["p_holds_when_it_does_not"] <= 1
    r = subprocess.run([sys.executable, "bench/countdown_mechanism.py", str(tmp_path)], cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.strip() == f"error: {tmp_path}: not a model directory (no config.json)"


def _bench(name):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "bench", name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _oracle(input_ids):
    """A stand-in model that puts all its probability on the data's own next token."""
    import types

    import torch

    logits = torch.full((1, input_ids.shape[1], 128), -1e4)
    logits[0, torch.arange(input_ids.shape[1] - 1), input_ids[0, 1:]] = 0.0
    return types.SimpleNamespace(logits=logits)


def _flat(a: int, b: int):
    """A stand-in model that gives tokens a and b probabilities 0.3 and 0.1 everywhere."""
    import types

    import torch

    def model(input_ids):
        logits = torch.full((1, input_ids.shape[1], 128), -1e4)
        logits[..., a], logits[..., b] = math.log(0.3), math.log(0.1)
        return types.SimpleNamespace(logits=logits)
    return model


def test_mechanism_decision_reads_the_token_after_each_list():
    """bench/countdown_mechanism.decision: a model that puts all its probability on the data's own next token (an
    oracle) says "holds" with p = 1 after every list that holds the target and 0 after every other, decided wrong 0;
    one that gives "." and ". No " 0.3 and 0.1 everywhere says 0.75 after each list, so every list that does not
    hold the target is decided wrong."""
    from tools import tiny

    mech = _bench("countdown_mechanism")
    recipe = tiny.CountdownRecipe()
    tok = tiny.build_tokenizer(recipe.words(), recipe.positions)
    dot, no = tok(".", add_special_tokens=False)["input_ids"][0], tok(". No ", add_special_tokens=False)["input_ids"][0]
    examples = cd.countdown_task(6, "test", 0, levels=(1,))

    d = mech.decision(_oracle, tok, examples, 0)
    assert d["checks_holding"] >= 3 and d["checks_not_holding"] >= 3
    assert (d["p_holds_when_it_does"], d["p_holds_when_it_does_not"], d["decided_wrong"]) == (1.0, 0.0, 0.0)
    f = mech.decision(_flat(dot, no), tok, examples, 0)
    assert (f["p_holds_when_it_does"], f["p_holds_when_it_does_not"]) == (0.75, 0.75)
    assert f["decided_wrong"] == round(f["checks_not_holding"] / (f["checks_holding"] + f["checks_not_holding"]), 3)


def test_attempts_given_reads_the_verdict_after_each_check():
    """bench/countdown_decision.attempts_given: an oracle (all probability on the data's own next token) says "yes"
    with p = 1 at every check whose attempt makes the target and 0 at every other; a model that gives "y" 0.3 and "n"
    0.1 everywhere says 0.75 at each, so every check that should say "no" is decided wrong."""
    from tools import tiny

    dec = _bench("countdown_decision")
    tok = tiny.build_tokenizer(tiny.CountdownRecipe().words(), 1024)
    y, n = dec.piece(tok, "y"), dec.piece(tok, "n")

    d = dec.attempts_given(_oracle, tok)
    assert d["checks_holding"] >= 100 and d["checks_not_holding"] >= 500
    assert (d["p_yes_when_it_does"], d["p_yes_when_it_does_not"], d["decided_wrong"]) == (1.0, 0.0, 0.0)
    f = dec.attempts_given(_flat(y, n), tok)
    assert (f["p_yes_when_it_does"], f["p_yes_when_it_does_not"]) == (0.75, 0.75)
    assert f["decided_wrong"] == round(f["checks_not_holding"] / (f["checks_holding"] + f["checks_not_holding"]), 3)


def test_decision_trials_forms():
    """bench/countdown_decision.py: target-in-check writes the target in each check and stops the list at it; a drill's
    checks list their results exactly and say "No" exactly where the target is missing; bad arguments: one error line."""
    import subprocess
    import sys

    dec = _bench("countdown_decision")
    search = ("Target 22 from 8, 3, 2.\nTry 3 + 2 = 5. Left: 8, 5.\nCheck 8, 5: 3, 13, 40. No 22.\nBack to 8, 3, 2.\n"
              "Try 8 + 3 = 11. Left: 2, 11.\nCheck 2, 11: 9, 13, 22.\nTry 2 * 11 = 22. That is the target.")
    assert dec.with_target("plain", search, 22) == search
    assert dec.with_target("target-in-check", search, 22).splitlines()[2:6:3] == [
        "Check 8, 5 for 22: 3, 13, 40. No.", "Check 2, 11 for 22: 9, 13, 22 is the target."]
    assert dec.with_target("target-in-check", "Check 2, 11: 9, 13, 22, 33.", 13) == "Check 2, 11 for 13: 9, 13 is the target."
    text = dec.drill(24, random.Random(0))
    lines = text.splitlines()
    assert lines[0] == "Target 24." and len(lines) == 9
    audit = cd.check_trace(text, 24)
    assert audit["checks"] == 8 and audit["wrong_checks"] == audit["missed_targets"] == 0
    holding = sum(not line.endswith("No 24.") for line in lines[1:])
    assert holding == sum(24 in dec.results(*map(int, line[6:line.index(":")].split(", "))) for line in lines[1:])
    r = subprocess.run([sys.executable, "bench/countdown_decision.py", "plain", "--steps", "0"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.strip() == "error: --steps must be >= 1, got 0"
