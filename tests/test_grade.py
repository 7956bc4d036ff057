"""tools/grade.py: offline grading with a stub policy of known pass rates, levels, the papers' filters, resume, bad input.

Run:  python -m pytest tests/test_grade.py -q        (a few seconds on CPU; no model)
"""
import json
import math
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import data
import tools.cli
from coding.problems import load_code_dataset
from reward import MathReward
from rollout import Completion, Engine
from tasks.load import load_dataset
from tasks.piecewise import builtin_code_task, partial_program
from tasks.templates import build_prompt
from tools import grade

FIX = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "grade")
N = 64  # samples per problem


def fx(name):
    return os.path.join(FIX, name)


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def read_text(path):
    with open(path) as f:
        return f.read()


def write_text(path, text, mode="w"):
    with open(path, mode) as f:
        f.write(text)


class StubEngine(Engine):
    """A policy that answers problem i right with probability p_i (torch's RNG, which tools/grade.py seeds per batch).

    `fail_after`: raise on the call after that many calls (an interrupted run). `calls` counts generate calls.
    """

    def __init__(self, examples, probs, fail_after=None):
        self.by_prompt = {build_prompt(None, ex.prompt): (ex.answer, p) for ex, p in zip(examples, probs)}
        self.fail_after, self.calls, self.prompts_seen = fail_after, 0, 0

    def count(self, prompts):
        """One generate call: raise when it is the one after `fail_after`, else count it."""
        if self.fail_after is not None and self.calls >= self.fail_after:
            raise KeyboardInterrupt("simulated interruption")
        self.calls += 1
        self.prompts_seen += len(prompts)

    def generate(self, prompts, n, params):
        self.count(prompts)
        out = []
        for p in prompts:
            gold, prob = self.by_prompt[p]
            u = torch.rand(n).tolist()
            # wrong answers: a different number (math-verify path), or no \boxed{} at all
            texts = [f"so \\boxed{{{gold}}}" if x < prob else (f"\\boxed{{{gold}+1}}" if k % 4 == 0 else "no idea")
                     for k, x in enumerate(u)]
            out.append([Completion([1], t, 1, False) for t in texts])
        return out


def fixture_problems():
    exs = data.load_file(fx("problems.jsonl"))
    rows = read_jsonl(fx("problems.jsonl"))
    return exs, [r["true_p"] for r in rows]


def reward():
    return MathReward(workers=0)


# ------------------------------------------------------------------------------------------------
# Pass rates and levels
# ------------------------------------------------------------------------------------------------
def test_grade_recovers_pass_rates_and_levels():
    exs, probs = fixture_problems()
    eng = StubEngine(exs, probs)
    res = grade.grade(exs, eng, None, reward(), N, batch_prompts=8, seed=3, progress=False)
    assert eng.calls == 3 and eng.prompts_seen == len(exs)  # 20 problems in batches of 8, each graded once
    for g, p in zip(res, probs):
        assert g.num_samples == N
        tol = 4 * math.sqrt(p * (1 - p) / N)  # 4 binomial sigmas (0 for p in {0, 1})
        assert abs(g.pass_rate - p) <= tol + 1e-12, (g.pass_rate, p)
    levels = grade.difficulty_levels([g.pass_rate for g in res])
    expected = {1.0: 1, 0.75: 2, 0.5: 3, 0.25: 4, 0.0: 5}  # four problems at each p: one level each
    assert levels == [expected[p] for p in probs]


def test_difficulty_levels_equal_buckets_and_ties():
    assert grade.difficulty_levels([i / 9 for i in range(10)]) == [5, 5, 4, 4, 3, 3, 2, 2, 1, 1]
    assert grade.difficulty_levels([0.9, 0.1, 0.5, 0.7, 0.3]) == [1, 5, 3, 2, 4]
    # ties share a level: the bucket holding the centre of their block, easiest first
    prs = [1.0] * 5 + [0.5, 0.5, 0.4, 0.3] + [0.0] * 11  # n = 20, buckets of 4 positions
    lv = grade.difficulty_levels(prs)
    assert lv == [1] * 5 + [2, 2, 2, 3] + [4] * 11  # all-wrong block: [9, 20), centre 14.5 of 20 -> level 4
    assert grade.difficulty_levels([0.0] * 7) == [3] * 7  # one pass rate: no information, the middle level
    assert grade.difficulty_levels([0.3]) == [3]
    for n in range(1, 40):  # no ties: equal-count buckets, monotone
        lv = grade.difficulty_levels([1 - i / n for i in range(n)])
        assert lv == sorted(lv) and max(lv.count(k) for k in range(1, 6)) - min(lv.count(k) for k in range(1, 6)) <= 1


def test_spearman():
    assert grade.spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert grade.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # ties: average ranks (textbook example, rho = Pearson of ranks)
    x, y = [1, 2, 2, 3], [1, 3, 2, 4]
    assert grade.ranks(x) == [1, 2.5, 2.5, 4]
    assert grade.spearman(x, y) == pytest.approx(0.9486832980505138)
    assert math.isnan(grade.spearman([1, 1, 1], [1, 2, 3]))


def test_grade_is_deterministic_and_seeded():
    exs, probs = fixture_problems()
    a = grade.grade(exs, StubEngine(exs, probs), None, reward(), 16, batch_prompts=8, seed=0, progress=False)
    b = grade.grade(exs, StubEngine(exs, probs), None, reward(), 16, batch_prompts=8, seed=0, progress=False)
    c = grade.grade(exs, StubEngine(exs, probs), None, reward(), 16, batch_prompts=8, seed=1, progress=False)
    assert a == b and a != c
    state = torch.get_rng_state()
    grade.grade(exs[:3], StubEngine(exs, probs), None, reward(), 4, progress=False)
    assert torch.equal(state, torch.get_rng_state())  # the caller's RNG stream is untouched


# ------------------------------------------------------------------------------------------------
# Filters
# ------------------------------------------------------------------------------------------------
COUNTS = [0, 0, 1, 4, 8, 14, 15, 16, 16, 16]  # fixtures/grade/graded.jsonl, of 16


def test_filter_rules_keep_exactly():
    ns = [16] * len(COUNTS)
    kept = lambda rule: [i for i, k in enumerate(grade.keep_mask(rule, COUNTS, ns)) if k]
    assert kept("skywork") == [2, 3, 4, 5, 6]  # 1..15 of 16
    assert kept("ringlite") == [2, 3, 4, 5, 6]  # neither all-correct nor all-wrong
    assert kept("mimo") == [0, 1, 2, 3, 4, 5]  # pass rate <= 0.9: 14/16 = 0.875 stays, 15/16 = 0.9375 goes
    assert grade.keep_mask("mimo", [9, 10], [10, 10]) == [True, False]  # exactly 0.9 stays
    table = grade.filter_table(COUNTS, ns)
    assert "all-wrong      2 ( 20.0%)" in table and "all-right      3 ( 30.0%)" in table
    assert "skywork" in table and "     5 ( 50.0%)" in table and "     6 ( 60.0%)" in table


def test_filter_subcommand(tmp_path, capsys):
    out = tmp_path / "kept.jsonl"
    grade.main(["filter", "--data", fx("graded.jsonl"), "--rule", "mimo", "--out", str(out)])
    rows = read_jsonl(out)
    src = read_jsonl(fx("graded.jsonl"))
    assert rows == src[:6]  # kept rows unchanged (levels of the whole graded set)
    assert "mimo: kept 6 of 10" in capsys.readouterr().out
    grade.main(["filter", "--data", fx("graded.jsonl"), "--rule", "skywork", "--out", str(out), "--relevel"])
    rows = read_jsonl(out)
    assert [r["id"] for r in rows] == ["g2", "g3", "g4", "g5", "g6"] and [r["difficulty"] for r in rows] == [5, 4, 3, 2, 1]
    with pytest.raises(SystemExit, match=r"problems.jsonl:1: not graded .*grade it first"):
        grade.main(["filter", "--data", fx("problems.jsonl"), "--rule", "mimo", "--out", str(tmp_path / "x.jsonl")])
    assert not (tmp_path / "x.jsonl").exists()


# ------------------------------------------------------------------------------------------------
# CLI end to end (stub engine), resume, bad input
# ------------------------------------------------------------------------------------------------
def cli(out, *extra, **kw):
    exs, probs = fixture_problems()
    eng = kw.pop("engine", None) or StubEngine(exs, probs)
    return grade.main(["--data", fx("problems.jsonl"), "--samples", str(N), "--batch-prompts", "6", "--seed", "7",
                       "--out", str(out), "--quiet", *extra], engine=eng), eng


def test_written_file_reads_back(tmp_path):
    out = tmp_path / "graded.jsonl"
    cli(out)
    assert not os.path.exists(str(out) + ".partial.jsonl")  # sidecar removed once the output is written
    back = load_dataset(str(out))
    raw = read_jsonl(out)
    _, probs = fixture_problems()
    assert len(back) == 20
    for ex, r, p in zip(back, raw, probs):
        assert ex.level == r["difficulty"] and ex.pass_rate == r["pass_rate"] and r["num_samples"] == N
        assert r["true_p"] == p and r["source"] == "fixture" and r["id"]  # original extra fields kept
        assert data.detect_schema(r) == "plain"
    assert [r["difficulty"] for r in raw] == [{1.0: 1, 0.75: 2, 0.5: 3, 0.25: 4, 0.0: 5}[p] for p in probs]
    # Parquet by extension, same content
    pq_out = tmp_path / "graded.parquet"
    cli(pq_out)
    assert [(e.prompt, e.level, e.pass_rate) for e in load_dataset(str(pq_out))] == \
        [(e.prompt, e.level, e.pass_rate) for e in back]


def test_grade_with_filter_writes_kept_only(tmp_path, capsys):
    out = tmp_path / "kept.jsonl"
    cli(out, "--filter", "skywork")
    rows = read_jsonl(out)
    assert {r["true_p"] for r in rows} == {0.75, 0.5, 0.25}  # all-correct and all-wrong problems dropped
    assert len(rows) == 12
    o = capsys.readouterr().out
    assert "all-wrong      4 ( 20.0%)" in o and "wrote 12 rows kept by skywork" in o


def test_resume_after_interruption(tmp_path):
    full = tmp_path / "full.jsonl"
    cli(full)
    exs, probs = fixture_problems()
    out = tmp_path / "resumed.jsonl"
    side = str(out) + ".partial.jsonl"
    with pytest.raises(SystemExit, match=r"interrupted: .*resumed.jsonl.partial.jsonl; rerun the same command"):
        cli(out, engine=StubEngine(exs, probs, fail_after=2))  # dies in the 3rd of 4 batches (6 problems each)
    assert not out.exists()
    lines = read_text(side).splitlines()
    assert len(lines) == 1 + 12 and json.loads(lines[0])["grade_progress"] == 1
    write_text(side, '{"index": 12, "ha', "a")  # a torn line, as a kill mid-write leaves
    eng = StubEngine(exs, probs)
    cli(out, engine=eng)
    assert eng.calls == 2 and eng.prompts_seen == 8  # only the two missing batches were graded
    assert read_text(out) == read_text(full)  # identical to the uninterrupted run
    assert not os.path.exists(side)


def test_resume_refuses_changed_input_or_settings(tmp_path):
    exs, probs = fixture_problems()
    out = tmp_path / "g.jsonl"
    side = str(out) + ".partial.jsonl"
    with pytest.raises(SystemExit, match="interrupted"):
        cli(out, engine=StubEngine(exs, probs, fail_after=1))
    with pytest.raises(SystemExit, match=r"other settings \(samples: 64 -> 32\).*delete"):
        grade.main(["--data", fx("problems.jsonl"), "--samples", "32", "--batch-prompts", "6", "--seed", "7",
                    "--out", str(out), "--quiet"], engine=StubEngine(exs, probs))
    lines = read_text(side).splitlines()
    rec = json.loads(lines[1])
    rec["hash"] = "0" * 16
    lines[1] = json.dumps(rec)
    write_text(side, "\n".join(lines) + "\n")
    with pytest.raises(SystemExit, match=r"partial.jsonl:2: problem #0 does not match the input"):
        cli(out)
    assert not out.exists()


def test_malformed_input_writes_nothing(tmp_path):
    out = tmp_path / "o.jsonl"
    with pytest.raises(SystemExit, match=r"bad_missing_answer.jsonl:3: field 'answer' is missing"):
        grade.main(["--data", fx("bad_missing_answer.jsonl"), "--out", str(out), "--quiet"], engine=StubEngine([], []))
    with pytest.raises(SystemExit, match=r"no such file"):
        grade.main(["--data", str(tmp_path / "nope.jsonl"), "--out", str(out)], engine=StubEngine([], []))
    with pytest.raises(SystemExit, match=r"must end in .jsonl or .parquet"):
        grade.main(["--data", fx("problems.jsonl"), "--out", str(tmp_path / "o.csv")], engine=StubEngine([], []))
    assert os.listdir(tmp_path) == []


def test_already_graded_input(tmp_path):
    out = tmp_path / "o.jsonl"
    eng = StubEngine(data.load_file(fx("graded.jsonl")), [0.5] * 10)
    with pytest.raises(SystemExit, match=r"graded.jsonl:1: already graded \(10 of 10 rows.*--force.*python -m tools.grade filter"):
        grade.main(["--data", fx("graded.jsonl"), "--out", str(out), "--quiet"], engine=eng)
    assert not out.exists() and eng.calls == 0
    grade.main(["--data", fx("graded.jsonl"), "--out", str(out), "--samples", "8", "--quiet", "--force"], engine=eng)
    rows = read_jsonl(out)
    assert all(r["num_samples"] == 8 for r in rows) and eng.calls == 1


def test_other_schemas_become_plain(tmp_path):
    exs = data.load_file(fx("mixed_schemas.jsonl"))
    out = tmp_path / "o.jsonl"
    grade.main(["--data", fx("mixed_schemas.jsonl"), "--out", str(out), "--samples", "4", "--quiet"],
               engine=StubEngine(exs, [1.0, 0.0, 1.0, 0.0]))
    rows = read_jsonl(out)
    assert [data.detect_schema(r) for r in rows] == ["plain"] * 4
    assert [r["prompt"] for r in rows] == [e.prompt for e in exs] and [r["answer"] for r in rows] == ["7", "\\frac{3}{4}", "42", "5"]
    assert rows[1]["level"] == "Level 2" and rows[1]["type"] == "Algebra" and "solution" in rows[1]
    assert rows[2]["extra_info"] == {"index": "x"} and "reward_model" not in rows[2] and rows[2]["data_source"] == "math_dapo"
    assert rows[3]["source_difficulty"] == 2  # a source rating is kept under another name
    assert [r["pass_rate"] for r in rows] == [1.0, 0.0, 1.0, 0.0]
    assert [e.level for e in load_dataset(str(out))] == [2, 4, 2, 4]


# ------------------------------------------------------------------------------------------------
# Code problems: scripted completions, the real sandbox
# ------------------------------------------------------------------------------------------------
CODE_FIX = os.path.join(os.path.dirname(FIX), "code")


def fenced(program):
    return f"```python\n{program}```"


class ScriptedEngine(StubEngine):
    """Known completions: prompt -> the list of texts returned for it (sample j gets texts[j % len(texts)]).

    Keyed by the code prompt (templates.build_prompt(..., "code")), so a math prompt finds nothing. `fail_after` as in
    StubEngine."""

    def __init__(self, script, fail_after=None):
        self.script = {build_prompt(None, q, "code"): texts for q, texts in script.items()}
        self.fail_after, self.calls, self.prompts_seen = fail_after, 0, 0

    def generate(self, prompts, n, params):
        self.count(prompts)
        return [[Completion([1], self.script[p][j % len(self.script[p])], 1, False) for j in range(n)] for p in prompts]


# six built-in code problems (seed 0): their levels (number of clauses), and 4 scripted samples each:
# S = the problem's own solution, P = piecewise.partial_program (base formula only), N = no code, T = an unterminated block
CODE_LEVELS = [1, 3, 3, 2, 2, 1]
CODE_SCRIPT = ["PPPP", "SSSS", "SSSP", "SSPP", "SPNT", "PPNT"]
# P passes a one-clause problem (it is the solution) and fails the others; N and T never run
CODE_PASS = [1.0, 1.0, 0.75, 0.5, 0.25, 0.5]
# levels by hand (n = 6): 1.0 x2 -> block [0, 2) centre 1 -> 1 + floor(5/6) = 1; 0.75 -> [2, 3) -> 1 + floor(12.5/6) = 3;
# 0.5 x2 -> [3, 5) -> 1 + floor(20/6) = 4; 0.25 -> [5, 6) -> 1 + floor(27.5/6) = 5
CODE_DIFFICULTY = [1, 1, 3, 4, 5, 4]


def code_engine(fail_after=None):
    exs = builtin_code_task(6, seed=0)
    assert [ex.level for ex in exs] == CODE_LEVELS
    kinds = lambda ex: {"S": ex.solution, "P": partial_program(ex), "N": "print it, I think",
                        "T": "```python\nn=int(input())\nprint(n"}
    return ScriptedEngine({ex.prompt: [kinds(ex)[c] for c in s] for ex, s in zip(exs, CODE_SCRIPT)}, fail_after)


def code_cli(out, *extra, engine=None):
    engine = engine or code_engine()
    rows = grade.main(["--data", "builtin-code", "--n", "6", "--samples", "4", "--batch-prompts", "2",
                       "--out", str(out), "--quiet", *extra], engine=engine)
    return rows, engine


@pytest.fixture(scope="module")
def graded_code(tmp_path_factory):
    out = tmp_path_factory.mktemp("code") / "graded.jsonl"
    code_cli(out)
    return out


def test_code_grading_known_pass_rates(graded_code):
    rows = read_jsonl(graded_code)
    assert [r["pass_rate"] for r in rows] == CODE_PASS
    assert [r["num_samples"] for r in rows] == [4] * 6 and [r["difficulty"] for r in rows] == CODE_DIFFICULTY
    # the rows: the problem dict of the built-in task plus its own level, then the grading fields
    exs = builtin_code_task(6, seed=0)
    for r, ex in zip(rows, exs):
        assert list(r) == ["question", "tests", "fn_name", "level", "pass_rate", "num_samples", "difficulty"]
        assert {k: r[k] for k in ("question", "tests", "fn_name")} == ex.answer and r["level"] == ex.level


def test_code_rows_read_back_with_levels(graded_code, tmp_path, capsys):
    back = load_dataset(str(graded_code), schema="code")  # what train.py --reward code reads
    assert [ex.level for ex in back] == CODE_DIFFICULTY and [ex.pass_rate for ex in back] == CODE_PASS
    exs = builtin_code_task(6, seed=0)
    assert [ex.answer["tests"] for ex in back] == [ex.answer["tests"] for ex in exs]
    assert all(ex.meta == {"kind": "code"} for ex in back)
    # before grading, a row's `level` is read (the built-in code rows as tools/grade.py writes them, less the grading)
    ungraded = tmp_path / "ungraded.jsonl"
    write_text(ungraded, "".join(json.dumps({k: r[k] for k in ("question", "tests", "fn_name", "level")}) + "\n"
                                 for r in read_jsonl(graded_code)))
    assert [ex.level for ex in load_code_dataset(str(ungraded))] == CODE_LEVELS
    # the filter subcommand takes a graded code file as it is
    kept = tmp_path / "kept.jsonl"
    grade.main(["filter", "--data", str(graded_code), "--rule", "skywork", "--out", str(kept)])
    assert read_jsonl(kept) == [r for r, p in zip(read_jsonl(graded_code), CODE_PASS) if 0 < p < 1]
    assert "skywork: kept 4 of 6" in capsys.readouterr().out


def test_code_grading_prints_rank_correlation(tmp_path, capsys):
    code_cli(tmp_path / "g.jsonl", "--filter", "mimo")
    o = capsys.readouterr().out
    rho = grade.spearman(CODE_DIFFICULTY, CODE_LEVELS)
    assert f"rank correlation with the input's own level (6 problems)" in o and f"spearman(difficulty, level) = {rho:+.3f}" in o
    assert [r["pass_rate"] for r in read_jsonl(tmp_path / "g.jsonl")] == [0.75, 0.5, 0.25, 0.5]  # <= 0.9 kept


def test_code_file_rows_kept_as_read(tmp_path):
    problems = {r["id"]: r for r in read_jsonl(os.path.join(CODE_FIX, "problems.jsonl"))}
    sol = lambda name: fenced(read_text(os.path.join(CODE_FIX, "solutions", name + ".py")))
    script = {"fib_mod": [sol("fib_mod__correct"), sol("fib_mod__partial_edge")],  # misses n = 0: 1 of 2
              "divisor_sum": [sol("divisor_sum__correct")],  # 2 of 2
              "max_subarray": [sol("max_subarray__partial"), "no code"],  # all-negative input fails: 0 of 2
              "brackets": [sol("brackets__correct"), sol("brackets__partial")]}  # 1 of 2
    out = tmp_path / "g.jsonl"
    grade.main(["--data", os.path.join(CODE_FIX, "problems.jsonl"), "--reward", "code", "--samples", "2",
                "--out", str(out), "--quiet"], engine=ScriptedEngine({problems[k]["question"]: v for k, v in script.items()}))
    rows = read_jsonl(out)
    assert [r["pass_rate"] for r in rows] == [0.5, 1.0, 0.0, 0.5] and [r["difficulty"] for r in rows] == [3, 1, 5, 3]
    for r in rows:  # the input row as read (id, time_limit, tests with their levels, fn_name), plus the grading
        assert {k: v for k, v in r.items() if k not in ("pass_rate", "num_samples", "difficulty")} == problems[r["id"]]
    assert [ex.level for ex in load_code_dataset(str(out))] == [3, 1, 5, 3]


def test_code_resume_after_interruption(graded_code, tmp_path):
    out = tmp_path / "resumed.jsonl"
    side = str(out) + ".partial.jsonl"
    with pytest.raises(SystemExit, match="interrupted"):
        code_cli(out, engine=code_engine(fail_after=1))  # dies in the 2nd of 3 batches (2 problems each)
    lines = read_text(side).splitlines()
    assert len(lines) == 1 + 2 and json.loads(lines[0])["settings"]["reward"] == "code"
    _, eng = code_cli(out)
    assert eng.calls == 2 and eng.prompts_seen == 4  # only the missing batches were graded
    assert read_text(out) == read_text(graded_code) and not os.path.exists(side)


def test_code_bad_input_one_error_line(tmp_path, capsys):
    out = tmp_path / "o.jsonl"
    good = read_text(os.path.join(CODE_FIX, "problems.jsonl")).splitlines()

    def error_of(*argv):
        assert tools.cli.cli(lambda: grade.main(list(argv), engine=ScriptedEngine({}))) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err
        return err

    assert "argument --reward: invalid choice: 'python'" in error_of("--data", "builtin-code", "--reward", "python", "--out", str(out))
    assert "--data builtin-code is a code task; it cannot be graded with --reward math" in \
        error_of("--data", "builtin-code", "--reward", "math", "--out", str(out))
    bad = tmp_path / "bad.jsonl"
    write_text(bad, good[0] + "\n" + json.dumps({"question": "Print 1.", "test": []}) + "\n")
    assert f"{bad}:2: missing field 'tests'" in error_of("--data", str(bad), "--reward", "code", "--out", str(out))
    write_text(bad, good[0] + "\n" + json.dumps({**json.loads(good[1]), "difficulty": 7}) + "\n")
    assert f"{bad}:2: field 'difficulty' must be an integer 1-5, got 7" in \
        error_of("--data", str(bad), "--reward", "code", "--out", str(out))
    assert "problems.jsonl:1: a code problem (field 'tests' or 'input_output'); grade code with --reward code" in \
        error_of("--data", os.path.join(CODE_FIX, "problems.jsonl"), "--out", str(out))
    assert "code problems are written as .jsonl" in error_of("--data", "builtin-code", "--out", str(tmp_path / "o.parquet"))
    assert "--schema gsm8k is a math schema" in error_of("--data", "builtin-code", "--schema", "gsm8k", "--out", str(out))
    assert sorted(os.listdir(tmp_path)) == ["bad.jsonl"]  # nothing written


def test_a_template_that_opens_the_thought_reads_the_answer_after_it(tmp_path):
    """Graded with models/tiny-qwen2-think's template (its generation prompt opens <think>): a right answer after
    </think> counts, the same answer in a thought that never closes does not (read as <think> + response, as in
    training); a --chat-template-kwargs that is not a JSON object is one error line."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(os.path.join(os.path.dirname(FIX), "..", "models", "tiny-qwen2-think"))
    exs = data.load_file(fx("problems.jsonl"))

    class Thinker(Engine):
        def generate(self, prompts, n, params):
            assert all(p.endswith("<|im_start|>assistant\n<think>\n") for p in prompts)  # the template opened it
            gold = [next(ex.answer for ex in exs if ex.prompt in p) for p in prompts]
            return [[Completion([1], (f"{g}\n</think>\n\n\\boxed{{{g}}}" if k % 2 else f"so \\boxed{{{g}}}"), 1, False)
                     for k in range(n)] for g in gold]

    out = tmp_path / "graded.jsonl"
    grade.main(["--data", fx("problems.jsonl"), "--samples", "4", "--out", str(out), "--quiet"], engine=Thinker(),
               tokenizer=tok)
    assert [r["pass_rate"] for r in read_jsonl(out)] == [0.5] * len(exs)  # only the closed thoughts' answers count
    with pytest.raises(SystemExit, match="^error: --chat-template-kwargs: not JSON"):
        grade.main(["--data", fx("problems.jsonl"), "--out", str(tmp_path / "x.jsonl"), "--chat-template-kwargs", "{"],
                   engine=Thinker(), tokenizer=tok)
