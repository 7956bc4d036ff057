"""The built-in code task (tasks/piecewise.py), graded for real in the sandbox, and --stages (Ring-lite's math ->
code RL in one run).

Run:  python -m pytest -q tests/test_code_task.py
"""
import json
import os

import pytest

import config
import train
from coding.code_reward import code_reward, grade
from tasks.addition import builtin_task
from tasks.load import load_dataset
from tasks.piecewise import builtin_code_task, partial_program
from trainer import samplers
from trainer import setup as trainer_setup
from trainer import stages


def test_deterministic_disjoint_and_levelled():
    a, b = builtin_code_task(300, seed=2), builtin_code_task(300, seed=2)
    assert [e.prompt for e in a] == [e.prompt for e in b] and [e.answer for e in a] == [e.answer for e in b]
    assert [e.prompt for e in a] != [e.prompt for e in builtin_code_task(300, seed=3)]
    test = builtin_code_task(200, "test")
    assert len({e.prompt for e in test}) == 200 and not {e.prompt for e in test} & {e.prompt for e in a}
    assert {e.level for e in a} == {1, 2, 3}
    for e in a:
        levels = [t["level"] for t in e.answer["tests"]]
        assert levels == sorted(levels) and set(levels) == set(range(1, e.level + 1)) and len(levels) == 2 * e.level
        assert e.prompt.count("; if n") == e.level - 1 and e.meta == {"kind": "code"}
    assert load_dataset("builtin-code", "test", n=5)[0].prompt == test[0].prompt
    assert load_dataset("builtin", "test", n=5, schema="code")[0].prompt == test[0].prompt


def test_hand_checked_problem():
    """One problem worked by hand: 'Read n. Print n-8; if n>69 print n*2+3; if n<16 print n+1.' (test split, seed 0)."""
    ex = next(e for e in builtin_code_task(200, "test") if e.level == 3)
    # recompute every expected output from the statement's text alone
    text = ex.prompt[len("Read n. Print "):-1]
    clauses = text.split("; if ")
    for t in ex.answer["tests"]:
        n = int(t["input"])
        r = eval(clauses[0], {"n": n})
        for c in clauses[1:]:
            cond, expr = c.split(" print ")
            if eval(cond, {"n": n}):
                r = eval(expr, {"n": n})
        assert t["output"] == f"{r}\n"


@pytest.fixture(scope="module")
def problems():
    return [e for e in builtin_code_task(60, "train", seed=4)][:9]


def test_solutions_pass_partial_programs_pass_level_one(problems):
    """In the real sandbox: the worked program passes every test; the base formula alone passes level 1 and, unless
    an override happens to agree with the base, nothing else; strict and soft give 1/L for it."""
    for ex in problems:
        full = grade(ex.solution, ex.answer, "soft")
        assert full.reward == 1.0 and all(full.passed), ex.prompt
        part = grade(partial_program(ex), ex.answer, "soft", early_stop=False)
        assert part.passed[:2] == [True, True]
        if ex.level == 1:
            assert part.reward == 1.0
        elif not any(part.passed[2:]):
            assert part.reward == pytest.approx(1 / ex.level)
            assert grade(partial_program(ex), ex.answer, "strict").reward == pytest.approx(1 / ex.level)


def test_strict_and_soft_differ_on_a_wrong_threshold():
    """A level-2 problem whose program tests n > hi+1 instead of n > hi: it fails the threshold test of level 2 and
    passes the other. Hand-computed with S_l = 1/2: soft = 1/2 + 1/2 * 1/2 = 0.75, strict = 1/2 (level 2 not whole)."""
    ex = next(e for e in builtin_code_task(100, "train", seed=1) if e.level == 2 and "n>" in e.prompt)
    hi = int(ex.prompt.split("n>")[1].split(" ")[0])
    wrong = ex.solution.replace(f"n>{hi}", f"n>{hi + 1}")
    assert grade(wrong, ex.answer, "soft", early_stop=False).passed == [True, True, False, True]
    assert grade(wrong, ex.answer, "soft").reward == pytest.approx(0.75)
    assert grade(wrong, ex.answer, "strict").reward == pytest.approx(0.5)
    assert grade(wrong, ex.answer, "all_or_nothing").reward == 0.0


def test_code_reward_runs_each_distinct_program_once(problems, monkeypatch):
    """Copies of one program for one problem are graded once; every copy gets the reward a lone run gives."""
    import coding.code_reward as cr

    ex = problems[1]
    comps = [ex.solution, partial_program(ex), ex.solution, "no code", ex.solution, partial_program(ex)]
    alone = [grade(c, ex.answer, "soft").reward for c in comps]
    calls = []
    real = cr.grade
    monkeypatch.setattr(cr, "grade", lambda c, *a, **k: calls.append(c) or real(c, *a, **k))
    assert code_reward(comps, [ex.answer] * len(comps), "soft", workers=2) == alone
    assert sorted(calls) == sorted({ex.solution, partial_program(ex), "no code"})
    other = problems[2]  # the same program for another problem is another run
    calls.clear()
    code_reward([ex.solution, ex.solution], [ex.answer, other.answer], "soft", workers=1)
    assert len(calls) == 2


# ------------------------------------------------------------------------------------------------
# --stages
def test_stages_split_the_steps_and_take_the_flags_defaults():
    cfg = config.parse_config(["--recipe", "c3po", "--max-steps", "7"])
    math, code = stages.parse_stages(cfg)
    assert (math.data, math.reward, math.max_new_tokens, math.start, math.end) == ("builtin-math", "math", 64, 0, 3)
    assert (code.data, code.reward, code.max_new_tokens, code.start, code.end, code.eval_problems) == (
        "builtin-code", "code", 96, 3, 7, 100)
    cfg = config.parse_config(["--stages", "data=builtin steps=2; data=builtin-code reward=code-soft; data=builtin",
                              "--max-steps", "9", "--max-new-tokens", "48"])
    assert [(s.start, s.end, s.kind, s.max_new_tokens) for s in stages.parse_stages(cfg)] == [
        (0, 2, "math", 48), (2, 5, "code", 48), (5, 9, "math", 48)]
    assert stages.filter_metric_for(cfg, "code-soft") == "score" and stages.filter_metric_for(cfg, "math") == "acc"
    assert stages.parse_stages(config.parse_config([]))[0].end == 40  # no --stages: one stage from the flags


@pytest.mark.parametrize("argv, msg", [
    (["--stages", "data=builtin-code reward=math"], "stage 1 ('data=builtin-code reward=math'): data=builtin-code does not go"),
    (["--stages", "data=builtin steps=50"], "do not fit --max-steps 40"),
    (["--stages", "data=builtin steps=20; data=builtin steps=20; data=builtin"], "do not fit --max-steps 40"),
    (["--stages", "reward=math"], "stage 1 ('reward=math'): no data="),
    (["--stages", "data=builtin len=3"], "'len=3' is not key=value with a key of data, reward, max_new_tokens"),
    (["--stages", "data=builtin steps=two"], "steps='two' is not an integer"),
    (["--stages", "data=builtin reward=code-fancy"], "reward 'code-fancy' is not one of"),
    (["--recipe", "c3po", "--train-data", "my.jsonl"], "--train-data: the run has --stages"),
    (["--stages", "data=builtin", "--curriculum", "compass"], "--stages: cannot be combined with --curriculum"),
    (["--train-data", "builtin-code"], "--train-data: builtin-code does not go with --reward math"),
])
def test_stage_errors(argv, msg):
    with pytest.raises(SystemExit) as e:
        config.parse_config(argv)
    assert str(e.value).startswith("error: ") and msg in str(e.value), str(e.value)


def test_two_stage_run_math_then_code(tmp_path):
    """The c3po recipe's math -> code schedule end to end on the math+code tiny model: step 1 trains on math prompts
    (math reward), step 2 on code prompts (sandboxed tests, longer responses); both tasks are evaluated; a resume from
    step 1 continues into the code stage exactly as the uninterrupted run did."""
    args = ["--recipe", "c3po", "--max-steps", "2", "--batch-size", "16", "--group-size", "4", "--mini-batch-size", "16",
            "--micro-batch-size", "8", "--eval-problems", "6",
            "--eval-samples", "2", "--reward-workers", "0", "--eval-every", "0", "--token-budget", "200", "--seed", "3",
            "--stages", config.RECIPES["c3po"]["stages"].replace("eval_problems=100", "eval_problems=6")]
    hist = train.main(args + ["--output-dir", str(tmp_path / "a"), "--save-every", "1"])
    assert [h["stage"] for h in hist] == [1, 2]
    samples = [json.loads(line) for line in open(tmp_path / "a" / "samples.jsonl")]
    assert {s["task"] for s in samples} == {"math", "code"}
    assert all("```python" not in s["completion"] for s in samples if s["task"] == "math")
    assert any("```python" in s["completion"] for s in samples if s["task"] == "code")
    summary = json.load(open(tmp_path / "a" / "summary.json"))
    for k in ("math accuracy_before", "code accuracy_after", "math avg@2_after", "code pass@2_before"):
        assert k in summary
    after = summary["after"]
    assert after["eval/accuracy"] == pytest.approx((after["eval/math/accuracy"] + after["eval/code/accuracy"]) / 2)
    assert "eval/code/score" in after and after["eval/code/response_length"] > after["eval/math/response_length"]
    cfg = json.load(open(tmp_path / "a" / "config.json"))
    assert "builtin-code" in cfg["stages"]
    # resume from step 1: the code stage's rollout is the same as in the uninterrupted run
    import shutil

    shutil.copytree(tmp_path / "a" / "checkpoint-1", tmp_path / "b" / "checkpoint-1")
    hist_b = train.main(args + ["--output-dir", str(tmp_path / "b"), "--resume", "auto"])
    drop = ("perf/", "wall")
    strip = lambda h: {k: v for k, v in h.items() if not k.startswith(drop)}  # noqa: E731
    assert strip(hist_b[-1]) == strip(hist[-1])


def test_train_problems_and_drop_solved(monkeypatch):
    """--train-problems N keeps the first N training problems; --drop-solved is the easy pool without the pool: a prompt
    solved perfectly once is never drawn again (resample.EasyPool with alpha 0, no refresh)."""
    import resample

    cfg = config.parse_config(["--train-problems", "6", "--drop-solved"])
    (_, sets, _) = trainer_setup.load_inputs(cfg)
    assert len(sets[0][0]) == 6 and sets[0][0][0].prompt == builtin_task(6, "train", seed=0)[0].prompt
    s = samplers.make_sampler(cfg, sets[0][0])
    assert isinstance(s, resample.EasyPool) and s.alpha == 0 and not s.refresh
    first = s.draw(0, 6)
    s.observe(first[:3], [1.0, 1.0, 1.0])
    s.observe(first[3:4], [0.5])
    assert not set(s.draw(1, 30)) & set(first[:3])
    for argv, msg in ((["--drop-solved", "--easy-pool-alpha", "0.1"], "--drop-solved: replaces the easy pool"),
                      (["--train-problems", "-1"], "--train-problems: must be >= 0")):
        with pytest.raises(SystemExit, match=msg):
            config.parse_config(argv)
