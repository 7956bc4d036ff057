"""Code rewards (code_reward.py) and test-difficulty levels (code_difficulty.py) on the fixture problems.

Run:  python -m pytest tests/test_code_reward.py -q        (about 20 s on 2 cores)
Expected rewards are computed by hand from the fixture levels (fixtures/code/problems.jsonl):
with equal level scores S_l = 1/3 for three levels.
"""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import coding.code_difficulty as cd  # noqa: E402
import coding.code_reward as cr  # noqa: E402
from coding.problems import CodeDataError, load_code_problems  # noqa: E402
from coding.sandbox import Limits  # noqa: E402

FIX = os.path.join(ROOT, "fixtures", "code")
PROBLEMS = {p["id"]: p for p in load_code_problems(os.path.join(FIX, "problems.jsonl"))}
SHORT = Limits(timeout=0.5)  # timing-out solutions cost 0.5 s per test, not the problem's limit


def completion(pid: str, kind: str) -> str:
    path = os.path.join(FIX, "solutions", f"{pid}__{kind}")
    with open(path + ".py" if os.path.exists(path + ".py") else path + ".txt") as f:  # .txt: does not compile
        code = f.read()
    return f"Let me think.\n```python\nprint('a sketch, not the answer')\n```\nFinal answer:\n```python\n{code}```\n"


# ---------------------------------------------------------------------------------------------
# Pure functions: extraction, comparison, scoring
@pytest.mark.parametrize("text, code", [
    ("no code here", None),
    ("```python\nprint(1)\n```", "print(1)\n"),
    ("```\nprint(2)\n```", "print(2)\n"),
    ("```py\na\n```\nthen\n```python3\nb\n```", "b\n"),
    ("```python\nfirst\n```\n```cpp\nint main(){}\n```", "first\n"),  # other languages skipped
    ("```python\nfirst\n```\n```python\ntruncated", "first\n"),  # unterminated last block ignored
    ("```python\nprint(1)", None),
])
def test_extract_code(text, code):
    assert cr.extract_code(text) == code


@pytest.mark.parametrize("text, code", [
    ("<think>\n```python\nsketch\n```\n</think>\n\n```python\nfinal\n```", "final\n"),  # after the thought
    ("<think>\n```python\nsketch\n```\n</think>\n\nno program after it", None),  # the thought's block is not read
    ("<think>\n```python\nsketch\n```\nstill thinking", None),  # a thought that never closes: nothing
    ("<think>a\n</think>\nb\n</think>\n```python\nlast\n```", "last\n"),  # closed twice: the last block
    ("<think>a</think>\n```python\nprint('</think>')\n```", "print('</think>')\n"),  # the tag inside the program
    ("```python\nprint('<think>')\n```", "print('<think>')\n"),  # no thought opened: read whole, tags and all
    ("```python\nsketch\n```\n</think>\n```python\nfinal\n```", "final\n"),  # no <think>: the last block
])
def test_extract_code_reads_after_the_thought(text, code):
    assert cr.extract_code(text) == code


def test_code_reward_with_the_prompts_thought_open():
    """thought_open (the prompt ends inside <think>): a response that never closes its thought scores 0 even when it
    holds a correct program; one that closes it is graded on the program after </think>, as without the flag."""
    right = completion("fib_mod", "correct")
    unclosed, closed = right, "reasoning\n</think>\n" + right
    probs = [PROBLEMS["fib_mod"]] * 2
    assert cr.CodeReward("all_or_nothing", workers=2)([unclosed, closed], probs)[0] == [1.0, 1.0]
    assert cr.CodeReward("all_or_nothing", workers=2, thought_open=True)([unclosed, closed], probs)[0] == [0.0, 1.0]


def test_stdout_comparison_normalises_whitespace():
    assert cr.stdout_matches("1  2\t3 \n\n\n", "1 2 3")
    assert cr.stdout_matches("a\r\nb\r\n", "a\nb\n")
    assert not cr.stdout_matches("1 2", "1\n2")
    assert not cr.stdout_matches("12", "1 2")
    assert not cr.stdout_matches("", "0")


def test_value_comparison():
    assert cr.values_match([1, 2.0000000001], [1, 2])
    assert not cr.values_match(True, 1) and not cr.values_match(1, True)
    assert cr.values_match({"a": [1]}, {"a": [1]}) and not cr.values_match({"a": 1}, {"b": 1})
    assert cr.call_args("[1, [2, 3]]") == [1, [2, 3]]
    assert cr.call_args('"abc"') == ["abc"]
    assert cr.call_args('[1, 2]\n"x"\n') == [[1, 2], "x"]  # LiveCodeBench: one JSON value per line


LEVELS = [1, 1, 1, 2, 2, 3]  # as fib_mod


@pytest.mark.parametrize("passed, aon, strict, soft", [
    ([1, 1, 1, 1, 1, 1], 1, 1, 1),
    ([0, 0, 0, 0, 0, 0], 0, 0, 0),
    ([1, 1, 1, 1, 1, 0], 0, 2 / 3, 2 / 3),
    ([1, 1, 1, 0, 1, 1], 0, 1 / 3, 1 / 3 + 1 / 6 + 1 / 3),  # a middle-level miss stops strict there
    ([1, 0, 0, 1, 0, 0], 0, 0, 1 / 9 + 1 / 6),
    ([0, 1, 1, 1, 1, 1], 0, 0, 2 / 9 + 1 / 3 + 1 / 3),
])
def test_score_hand_computed(passed, aon, strict, soft):
    assert cr.score(passed, LEVELS, "all_or_nothing") == aon
    assert cr.score(passed, LEVELS, "strict") == pytest.approx(strict)
    assert cr.score(passed, LEVELS, "soft") == pytest.approx(soft)


def test_score_weights_and_single_level():
    # weights="tests": S = 3/6, 2/6, 1/6, so soft is the fraction of tests passed
    assert cr.score([1, 1, 1, 0, 1, 0], LEVELS, "soft", weights="tests") == pytest.approx(4 / 6)
    assert cr.score([1, 1, 1, 1, 1, 0], LEVELS, "strict", weights="tests") == pytest.approx(5 / 6)
    one = [1, 1, 1, 1]  # no levels: strict == all-or-nothing, soft == fraction passed
    assert cr.score([1, 0, 1, 1], one, "strict") == 0 and cr.score([1, 1, 1, 1], one, "strict") == 1
    assert cr.score([1, 0, 1, 1], one, "soft") == pytest.approx(0.75)
    assert sum(cr.level_scores([1, 2, 2, 5]).values()) == pytest.approx(1)
    with pytest.raises(ValueError):
        cr.score([1], [1], "partial")


# ---------------------------------------------------------------------------------------------
# Loading
def test_load_problems_and_taco_style():
    assert set(PROBLEMS) == {"fib_mod", "divisor_sum", "max_subarray", "brackets"}
    assert [t["level"] for t in PROBLEMS["fib_mod"]["tests"]] == LEVELS
    taco = load_code_problems(os.path.join(FIX, "taco_style.jsonl"))
    assert taco[0]["fn_name"] is None and taco[0]["tests"][0] == {"input": "1 2\n", "output": "3\n", "level": 1}
    assert taco[1]["fn_name"] == "reverse_list" and taco[1]["tests"][0]["input"] == "[[1, 2, 3]]"
    rewards = cr.code_reward(["```python\na, b = map(int, input().split())\nprint(a + b)\n```",
                              "```python\ndef reverse_list(xs):\n    return xs[::-1]\n```"], taco)
    assert rewards == [1.0, 1.0]


@pytest.mark.parametrize("line, message", [
    ('{"question": "q"}', "missing field 'tests'"),
    ('{"tests": [{"input": "1", "output": "1"}]}', "missing field 'question'"),
    ('{"question": "q", "tests": [{"input": "1"}]}', "test 0: missing field 'output'"),
    ('{"question": "q", "tests": [{"input": "1", "output": "1", "level": 0}]}', "field 'level'"),
    ('{"question": "q", "tests": [{"input": "1", "output": "1"}], "test_levels": [1, 2]}', "test_levels"),
    ('{"question": "q", "input_output": "{bad json"}', "input_output"),
    ("not json", "invalid JSON"),
])
def test_load_errors_name_file_line_field(tmp_path, line, message):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"question": "ok", "tests": [{"input": "", "output": ""}]}\n' + line + "\n")
    with pytest.raises(CodeDataError) as e:
        load_code_problems(str(path))
    assert str(e.value).startswith(f"{path}:2: ") and message in str(e.value)


# ---------------------------------------------------------------------------------------------
# Real runs in the sandbox: one soft (run-everything) grading per solution, all modes from it
@pytest.mark.parametrize("pid, kind, passed, aon, strict, soft", [
    ("fib_mod", "correct", [1, 1, 1, 1, 1, 1], 1, 1, 1),
    ("fib_mod", "partial_slow", [1, 1, 1, 1, 1, 0], 0, 2 / 3, 2 / 3),  # times out on n = 10^18
    ("fib_mod", "partial_edge", [1, 1, 1, 0, 1, 1], 0, 1 / 3, 5 / 6),  # wrong for n = 0
    ("fib_mod", "wrong", [1, 0, 0, 1, 0, 0], 0, 0, 1 / 9 + 1 / 6),  # n % 1000 is right for 1 and 0
    ("max_subarray", "partial", [1, 1, 1, 1, 1, 0, 0], 0, 2 / 3, 2 / 3),  # all-negative arrays
    ("brackets", "correct", [1] * 7, 1, 1, 1),
    ("brackets", "partial", [1, 1, 1, 1, 0, 1, 0], 0, 2 / 3, 2 / 3 + 1 / 9),  # order ignored
])
def test_fixture_solutions(pid, kind, passed, aon, strict, soft):
    problem = PROBLEMS[pid]
    g = cr.grade(completion(pid, kind), problem, "soft", limits=SHORT)
    assert [int(p) for p in g.passed] == passed
    assert g.reward == pytest.approx(soft)
    levels = [t["level"] for t in problem["tests"]]
    assert cr.score(g.passed, levels, "strict") == pytest.approx(strict)
    assert cr.score(g.passed, levels, "all_or_nothing") == aon


def test_early_stop_gives_same_reward_and_runs_less():
    comp = completion("fib_mod", "partial_edge")
    g = cr.grade(comp, PROBLEMS["fib_mod"], "strict", limits=SHORT)
    assert g.reward == pytest.approx(1 / 3)
    assert g.passed.count(None) == 2  # the level-2 miss stopped the run; level 3 never ran


@pytest.mark.parametrize("kind, status", [("crash", "error"), ("syntax", "error"), ("timeout", "timeout")])
def test_failing_solutions_score_zero(kind, status):
    g = cr.grade(completion("fib_mod", kind), PROBLEMS["fib_mod"], "strict", limits=SHORT)
    assert g.reward == 0 and g.results[0].status == status
    assert g.passed.count(None) == 5  # early stop after the first (easiest) test


def test_no_code_block_scores_zero_without_running():
    g = cr.grade("The answer is 42.", PROBLEMS["fib_mod"], "soft")
    assert g.reward == 0 and g.code is None and g.results == [None] * 6


def test_batch_reward_parallel():
    comps = [completion("fib_mod", "correct"), completion("max_subarray", "partial"),
             completion("brackets", "partial"), "no code", completion("divisor_sum", "correct")]
    probs = [PROBLEMS[p] for p in ("fib_mod", "max_subarray", "brackets", "fib_mod", "divisor_sum")]
    assert cr.code_reward(comps, probs, mode="strict", workers=2) == pytest.approx([1, 2 / 3, 2 / 3, 0, 1])
    fn = cr.make_reward_fn("all_or_nothing", workers=2)
    assert fn(comps[:2], probs[:2]) == [1.0, 0.0]


# ---------------------------------------------------------------------------------------------
# Difficulty levels from pass rates
def test_assign_levels_quantiles_with_ties():
    assert cd.assign_levels([1, 1, 1, 0.5, 0.5, 0], 3) == [1, 1, 1, 2, 2, 3]
    assert cd.assign_levels([0.2, 0.9, 0.5, 0.7], 2) == [2, 1, 2, 1]
    assert cd.assign_levels([0.5] * 4, 3) == [1, 1, 1, 1]  # all tied: one level
    assert cd.assign_levels([1.0, 0.0], 5) == [1, 2]  # fewer tests than levels
    assert cd.assign_levels([0.9, 0.8, 0.7], 1) == [1, 1, 1]
    assert cd.assign_levels([2 / 3, 0.5, 0.5, 0.5, 0.5, 1 / 3], 3) == [1, 2, 2, 2, 2, 3]  # big tie group moves on


def test_difficulty_script_end_to_end(tmp_path):
    """Strip the fixture levels, rebuild them from sampled solutions, and recover them."""
    problems = [dict(p, tests=[{"input": t["input"], "output": t["output"]} for t in p["tests"]])
                for p in PROBLEMS.values() if p["id"] in ("max_subarray", "brackets")]
    probs_path, sols_path, out_path = tmp_path / "p.jsonl", tmp_path / "s.jsonl", tmp_path / "out.jsonl"
    probs_path.write_text("".join(json.dumps(p) + "\n" for p in problems))
    sols = [{"problem_id": "max_subarray", "completions": [completion("max_subarray", k) for k in ("correct", "partial")]},
            {"problem_id": 1, "passed": [[1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 1, 0], [1, 1, 1, 0, 0, 0, 0]]}]
    sols_path.write_text("".join(json.dumps(s) + "\n" for s in sols))
    subprocess.run([sys.executable, "-m", "coding.code_difficulty", "--problems", str(probs_path),
                    "--solutions", str(sols_path), "--levels", "3", "--out", str(out_path), "--no-progress"],
                   check=True, capture_output=True, cwd=str(tmp_path), env=dict(os.environ, PYTHONPATH=ROOT))
    out = load_code_problems(str(out_path))
    # max_subarray: pass rates 1 x5, 0.5 x2 -> two levels (ties kept together)
    assert out[0]["test_pass_rates"] == [1, 1, 1, 1, 1, 0.5, 0.5]
    assert [t["level"] for t in out[0]["tests"]] == [1, 1, 1, 1, 1, 2, 2] == out[0]["test_levels"]
    # brackets: rates 1,1,1,2/3,1/3,2/3,1/3 -> levels 1,1,1,2,3,2,3
    assert [t["level"] for t in out[1]["tests"]] == [1, 1, 1, 2, 3, 2, 3]
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".tmp-")]  # atomic write left no temp file


def test_difficulty_script_reports_bad_input(tmp_path):
    sols = tmp_path / "s.jsonl"
    sols.write_text('{"completions": []}\n')
    r = subprocess.run([sys.executable, "-m", "coding.code_difficulty", "--problems",
                        os.path.join(FIX, "problems.jsonl"), "--solutions", str(sols), "--out", str(tmp_path / "o.jsonl")],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode != 0 and f"{sols}:1: missing field 'problem_id'" in r.stderr
