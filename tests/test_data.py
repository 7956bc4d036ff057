"""data.py: every loader on its fixture schema, one clear error per bad file, the built-in task, prompts.

Run:  python -m pytest tests/test_data.py -q        (about 2 s on CPU)
"""
import json
import os
import re
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import data
from data import DataError
from tasks.addition import LEVELS, builtin_task, worked_solution
from tasks.load import load_dataset
from tasks.split import split_of
from tasks.templates import INSTRUCTION, build_prompt
from tools import tiny

FIX = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "math")


def fx(name):
    return os.path.join(FIX, name)


# ------------------------------------------------------------------------------------------------
# Loaders, one per schema
# ------------------------------------------------------------------------------------------------
def test_gsm8k():
    ex = data.load_file(fx("gsm8k.jsonl"))
    assert len(ex) == 4
    assert ex[0].prompt.startswith("A baker fills 12 trays") and ex[0].answer == "66"
    assert ex[1].answer == "1234"  # "#### 1,234": thousands separator removed
    assert ex[2].answer == "-7"
    assert ex[3].answer == "0.75"  # "####  0.75 ": surrounding whitespace stripped
    assert all(e.level is None and e.pass_rate is None for e in ex)


def test_math_last_boxed_with_nested_braces():
    ex = data.load_file(fx("math.jsonl"))
    assert [e.answer for e in ex] == ["\\frac{3}{4}", "7", "\\frac{\\sqrt{2}}{2}", "\\{-2, 2\\}"]
    assert ex[0].prompt == "Simplify $\\frac{6}{8}$."
    # Row 2 has \boxed{-7} first and \boxed{7} last: the last one is the answer.
    assert ex[1].answer == "7"
    # MATH's "Level N" strings are its 1-5 difficulty scale
    assert [e.level for e in ex] == [1, 2, 3, 5]  # the fixture's "Level 1", "Level 2", "Level 3", "Level 5"


def test_math500_answer_field_wins_over_solution():
    ex = data.load_file(fx("math500.json"))
    assert [e.answer for e in ex] == ["1024", "\\frac{1}{8}", "[1,2)"]
    # Row 2's solution boxes the unreduced 125/1000; the `answer` field is what counts.
    assert data.last_boxed(json.load(open(fx("math500.json")))[1]["solution"]) == "\\frac{125}{1000}"
    assert [e.level for e in ex] == [1, 2, 4]  # integer levels are kept


def test_dapo_chat_prompt_and_ground_truth():
    ex = data.load_file(fx("dapo.parquet"))
    assert [e.answer for e in ex] == ["56", "16", "\\frac{5}{6}"]
    # The prompt is the user turn's content (the system turn before it is skipped).
    assert ex[0].prompt.startswith("Solve the following math problem step by step.")
    assert "Find the sum of all positive divisors of 28." in ex[0].prompt
    assert "careful mathematician" not in ex[0].prompt


def test_aime():
    ex = data.load_file(fx("aime.jsonl"))
    assert [e.answer for e in ex] == ["1", "19", "030"]  # kept as written; the reward compares numerically
    assert ex[1].prompt.startswith("How many ordered pairs")
    assert ex[2].meta == {"id": "2031-II-3"}


def test_graded_keeps_difficulty_and_pass_rate():
    ex = data.load_file(fx("graded.jsonl"))
    assert [(e.prompt, e.answer) for e in ex][:2] == [("What is 3+4?", "7"), ("What is 17*23?", "391")]
    assert [e.level for e in ex] == [1, 3, 4, 5]
    assert [e.pass_rate for e in ex] == [0.9375, 0.5, 0.125, 0.0]
    assert ex[0].meta == {"num_samples": 16}


def test_load_dataset_dispatch_and_truncation():
    assert [e.answer for e in load_dataset(fx("gsm8k.jsonl"), n=2)] == ["66", "1234"]
    assert len(load_dataset("builtin", split="test", n=7)) == 7


def test_forced_schema():
    # A plain-schema file read as GSM8K: the error names the GSM8K field that is missing.
    with pytest.raises(DataError, match=r"graded\.jsonl:1: .*'answer'.*####"):
        data.load_file(fx("graded.jsonl"), schema="gsm8k")


# ------------------------------------------------------------------------------------------------
# Bad input: one DataError naming file, line/row and field
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name,parts", [
    # line 3 has no "answer" key; schema detection is per row, so the row reads as an unknown schema
    # whose message lists what was expected, "plain (prompt, answer)"
    ("bad_missing_answer.jsonl", ["bad_missing_answer.jsonl:3:", "answer", "['prompt']"]),
    ("bad_unknown_schema.jsonl", ["bad_unknown_schema.jsonl:1:", "unknown schema", "['label', 'text']"]),
    ("bad_json.jsonl", ["bad_json.jsonl:2:", "invalid JSON"]),
    ("bad_binary.parquet", ["bad_binary.parquet:", "cannot read"]),
    ("bad_difficulty.jsonl", ["bad_difficulty.jsonl:2:", "difficulty", "9"]),
])
def test_bad_files(name, parts):
    with pytest.raises(DataError) as e:
        data.load_file(fx(name))
    for p in parts:
        assert p in str(e.value), (p, str(e.value))


def _write(tmp_path, name, rows):
    p = tmp_path / name
    p.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(p)


@pytest.mark.parametrize("rows,parts", [
    ([{"prompt": "a", "answer": "1"}, {"prompt": "b", "answer": " "}], [":2:", "field 'answer' is missing or empty"]),
    ([{"prompt": "", "answer": "1"}], [":1:", "field 'prompt'"]),
    ([{"question": "q", "answer": "no final answer"}], [":1:", "field 'answer'", "####"]),
    ([{"problem": "p", "solution": "no box here"}], [":1:", "field 'solution'", "\\boxed"]),
    ([{"prompt": [{"role": "user", "content": "q"}], "reward_model": {"style": "rule"}}], [":1:", "reward_model.ground_truth"]),
    ([{"prompt": [{"role": "system", "content": "s"}], "reward_model": {"ground_truth": "1"}}], [":1:", "field 'prompt'"]),
    ([{"prompt": "a", "answer": "1", "pass_rate": 1.5}], [":1:", "pass_rate", "1.5"]),
    ([{"prompt": "a", "answer": "1", "difficulty": 0}], [":1:", "difficulty"]),
    (["[1, 2]"], [":1:", "row is a list"]),
])
def test_bad_rows(tmp_path, rows, parts):
    path = _write(tmp_path, "rows.jsonl", rows)
    with pytest.raises(DataError) as e:
        data.load_file(path)
    assert str(e.value).startswith(path)
    for p in parts:
        assert p in str(e.value), (p, str(e.value))


def test_blank_lines_keep_line_numbers(tmp_path):
    path = _write(tmp_path, "gaps.jsonl", [{"prompt": "a", "answer": "1"}, "", "{oops"])
    with pytest.raises(DataError, match=re.escape(path + ":3: invalid JSON")):
        data.load_file(path)


def test_missing_file_unsupported_extension_empty_file(tmp_path):
    with pytest.raises(DataError, match="no such file"):
        data.load_file(str(tmp_path / "nope.jsonl"))
    csv = tmp_path / "d.csv"
    csv.write_text("prompt,answer\na,1\n")
    with pytest.raises(DataError, match=r"d\.csv: unsupported file type '\.csv'"):
        data.load_file(str(csv))
    empty = tmp_path / "e.jsonl"
    empty.write_text("\n")
    with pytest.raises(DataError, match=r"e\.jsonl: no rows"):
        data.load_file(str(empty))
    notlist = tmp_path / "o.json"
    notlist.write_text('{"prompt": "a", "answer": "1"}')
    with pytest.raises(DataError, match="expected a JSON list"):
        data.load_file(str(notlist))


# ------------------------------------------------------------------------------------------------
# Built-in task
# ------------------------------------------------------------------------------------------------
def _check_problem(ex):
    ops = [int(x) for x in ex.prompt.split("+")]
    assert len(ops) == LEVELS[ex.level] == ex.level + 1
    assert 1 <= ops[0] <= 99 and all(1 <= x <= 9 for x in ops[1:])
    assert ex.answer == str(sum(ops))
    assert ex.solution.endswith(f"\\boxed{{{ex.answer}}}")
    # every worked step "a+b=c" is right and chains from the previous partial sum
    steps = ex.solution.rsplit(" ", 1)[0].split(" ")
    acc = ops[0]
    assert len(steps) == len(ops) - 1
    for step, x in zip(steps, ops[1:]):
        assert step == f"{acc}+{x}={acc + x}"
        acc += x


def test_worked_solution_by_hand():
    assert worked_solution([17, 25, 9]) == "17+25=42 42+9=51 \\boxed{51}"


def test_builtin_deterministic_and_seeded():
    a = builtin_task(200, seed=3)
    b = builtin_task(200, seed=3)
    c = builtin_task(200, seed=4)
    assert [(e.prompt, e.answer, e.level) for e in a] == [(e.prompt, e.answer, e.level) for e in b]
    assert [e.prompt for e in a] != [e.prompt for e in c]
    assert builtin_task(50, split="test", seed=3)[0].prompt == builtin_task(50, split="test", seed=3)[0].prompt


def test_builtin_splits_disjoint_and_well_formed():
    train = builtin_task(20000, split="train", seed=0)
    test = builtin_task(500, split="test", seed=0)
    test_other_seed = builtin_task(500, split="test", seed=1)
    tr = {e.prompt for e in train}
    assert not tr & {e.prompt for e in test} and not tr & {e.prompt for e in test_other_seed}
    assert len({e.prompt for e in test}) == len(test) == 500  # held-out split has no duplicates
    assert all(split_of(e.prompt) == "test" for e in test)
    assert {e.level for e in train} == {e.level for e in test} == {1, 2, 3, 4, 5}
    for e in train[:2000] + test:
        _check_problem(e)


def test_builtin_errors():
    with pytest.raises(DataError, match="split"):
        builtin_task(5, split="val")
    with pytest.raises(DataError, match="cannot draw"):  # level 1 has 891 problems, ~180 of them held out
        builtin_task(1000, split="test", levels=(1,))


# ------------------------------------------------------------------------------------------------
# last_boxed and prompts
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text,want", [
    ("so \\boxed{42}.", "42"),
    ("\\boxed{\\frac{\\sqrt{2}}{2}}", "\\frac{\\sqrt{2}}{2}"),  # nested braces
    ("\\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),  # escaped set braces are balanced too
    ("\\boxed{1} then \\boxed{2}", "2"),  # the last one
    ("no box at all", None),
    ("\\boxed{}", ""),
    ("\\boxed{5} and then \\boxed{6", None),  # the last \\boxed is unbalanced (truncated): no answer
    ("\\boxed{{1}", None),
    ("\\boxed", None),
    ("\\boxed 5", "5"),  # brace-less argument
    ("so \\boxed 12$ done", "12"),
    ("\\boxed 5 and then {x}", "5"),  # not the brace further on
    ("\\boxedx {3}", None),
    ("\\boxed. {3}", None),
    ("\\boxed {7}", "7"),
])
def test_last_boxed(text, want):
    assert data.last_boxed(text) == want


CHAT = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}")


def test_build_prompt_chat_template():
    tok = tiny.build_tokenizer()
    tok.chat_template = CHAT
    q = "What is \\frac{1}{2} + {x}?"
    assert build_prompt(tok, q) == f"<|user|>{q}\n{INSTRUCTION}\n<|assistant|>"


def test_build_prompt_plain():
    tok = tiny.build_tokenizer()
    assert not getattr(tok, "chat_template", None)
    q = "What is \\frac{1}{2} + {x}?"  # braces in the question survive (no str.format)
    assert build_prompt(tok, q) == (
        f"Question: {q}\nPlease reason step by step, and put your final answer within \\boxed{{}}.\nAnswer: "
    )
    assert build_prompt(None, "1+2") == "Question: 1+2\n" + INSTRUCTION + "\nAnswer: "


def test_math_level_strings():
    row = {"problem": "p", "solution": "\\boxed{1}"}
    assert data.row_to_example({**row, "level": "Level 4"}).level == 4
    assert data.row_to_example({**row, "level": "Level ?"}).level is None  # MATH has a few of these
    with pytest.raises(ValueError, match="1-5"):
        data.row_to_example({**row, "level": "Level 9"})
