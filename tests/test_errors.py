"""Bad input ends in one `error:` line naming what and where, exit code 2, no traceback, nothing written.

Each case runs a script's entry point through `tools.cli.cli` (what `python train.py ...` runs) and reads stderr;
one case runs `python train.py` in a subprocess to check the exit code end to end.
Run:  python -m pytest -q tests/test_errors.py        (~20 s)
"""
import json
import os
import subprocess
import sys

import pytest

import evaluate
import train
from tools import grade
from tools.cli import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(ROOT, "fixtures")


def run_cli(main, argv, capsys):
    code = cli(main, argv)
    err = capsys.readouterr().err
    return code, err


def assert_one_error_line(code, err, *needles):
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    for n in needles:
        assert n in lines[0], (n, lines[0])


def model_dir_without(tmp_path, tiny_model_path, missing: tuple[str, ...]):
    """A copy of the tiny model's directory with some files left out."""
    import shutil

    d = tmp_path / "model"
    shutil.copytree(tiny_model_path, d)
    for name in os.listdir(d):
        if name in missing or (name.startswith("tokenizer") and "tokenizer" in missing):
            os.remove(d / name)
    return str(d)


@pytest.mark.parametrize("argv, needles", [
    (["--train-data", os.path.join(FIX, "math", "bad_json.jsonl")], ["bad_json.jsonl:2", "invalid JSON"]),
    (["--train-data", os.path.join(FIX, "math", "bad_missing_answer.jsonl")], ["bad_missing_answer.jsonl:3"]),
    (["--train-data", "/missing/train.jsonl"], ["/missing/train.jsonl", "no such file"]),
    (["--eval-data", "/missing/eval.jsonl"], ["/missing/eval.jsonl", "no such file"]),
    (["--max-steps", "abc"], ["--max-steps", "invalid int value"]),
    (["--no-such-flag"], ["unrecognized arguments: --no-such-flag"]),
    (["--group-size", "1"], ["--group-size", ">= 2"]),
    (["--recipe", "nope"], ["--recipe", "'nope'"]),
    (["--reward", "code", "--train-data", os.path.join(FIX, "math", "bad_json.jsonl")], ["bad_json.jsonl:1"]),
    (["--chat-template-kwargs", "{enable_thinking: false}"], ["--chat-template-kwargs", "not JSON"]),
    (["--dual-clip", "0.5"], ["--dual-clip", "> 1"]),
    (["--rollout-lag", "1", "--tis-mode", "clamp"], ["--tis-mode", "'clamp'"]),
])
def test_train_bad_flags_and_data(argv, needles, tmp_path, capsys):
    out = tmp_path / "run"
    code, err = run_cli(train.main, ["--output-dir", str(out), *argv], capsys)
    assert_one_error_line(code, err, *needles)
    assert not out.exists()  # nothing written


@pytest.mark.parametrize("missing, needle", [
    (("config.json",), "no config.json"),
    (("tokenizer", "tokenizer.json", "tokenizer_config.json"), "no tokenizer"),
])
def test_train_model_directory_without_files(missing, needle, tiny_model_path, tmp_path, capsys):
    model = model_dir_without(tmp_path, tiny_model_path, missing)
    out = tmp_path / "run"
    code, err = run_cli(train.main, ["--model", model, "--output-dir", str(out), "--eval-problems", "4"], capsys)
    assert_one_error_line(code, err, "--model", model, needle)
    assert not out.exists()


def test_train_missing_model_directory(tmp_path, capsys):
    out = tmp_path / "run"
    code, err = run_cli(train.main, ["--model", str(tmp_path / "nope"), "--output-dir", str(out)], capsys)
    assert_one_error_line(code, err, "--model", "no such directory")
    assert not out.exists()


def test_train_resume_paths(tiny_model_path, tmp_path, capsys):
    out = tmp_path / "run"
    code, err = run_cli(train.main, ["--model", tiny_model_path, "--output-dir", str(out),
                                     "--resume", str(tmp_path / "nope")], capsys)
    assert_one_error_line(code, err, "--resume", "nope", "does not exist")
    (tmp_path / "empty").mkdir()
    code, err = run_cli(train.main, ["--model", tiny_model_path, "--output-dir", str(out),
                                     "--resume", str(tmp_path / "empty")], capsys)
    assert_one_error_line(code, err, "--resume", "not a checkpoint directory")
    # a checkpoint directory whose model files are gone
    ck = tmp_path / "ck"
    ck.mkdir()
    (ck / "trainer_state.pt").write_bytes(b"")
    code, err = run_cli(train.main, ["--model", tiny_model_path, "--output-dir", str(out), "--resume", str(ck),
                                     "--eval-problems", "4"], capsys)
    assert_one_error_line(code, err, "--resume", "no config.json")
    assert not out.exists()


def test_evaluate_and_grade_bad_input(tmp_path, capsys):
    code, err = run_cli(evaluate.main, ["--data", str(tmp_path / "none.jsonl")], capsys)
    assert_one_error_line(code, err, "none.jsonl", "no such file")
    code, err = run_cli(evaluate.main, ["--rollout", "sglang"], capsys)
    assert_one_error_line(code, err, "--rollout")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"prompt": "1+1"}) + "\n")
    code, err = run_cli(grade.main, ["--data", str(bad), "--out", str(tmp_path / "o.jsonl")], capsys)
    assert_one_error_line(code, err, "bad.jsonl")
    assert not (tmp_path / "o.jsonl").exists()


def test_train_script_exit_code(tmp_path):
    out = tmp_path / "run"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "train.py"), "--train-data", "/missing.jsonl",
                        "--output-dir", str(out)], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and r.stderr.strip() == "error: /missing.jsonl: no such file", r.stderr
    assert not out.exists()


@pytest.mark.parametrize("where", ["under a file", "/proc"])
def test_train_output_dir_that_cannot_be_made(where, tmp_path, capsys):
    """An --output-dir with a file on its path, or where no directory can be made: one line naming it, exit code 2,
    before anything is written (config's check, not a traceback from os.makedirs)."""
    if where == "/proc" and not os.path.isdir("/proc"):
        pytest.skip("no /proc on this system")
    a_file = tmp_path / "README.md"
    a_file.write_text("x")
    out = str(a_file / "run") if where == "under a file" else "/proc/grpo-recipes-test"
    code, err = run_cli(train.main, ["--output-dir", out], capsys)
    assert_one_error_line(code, err, f"--output-dir: cannot make {out}: ",
                          "README.md is a file" if where == "under a file" else "no directory can be made in /proc")
    assert a_file.read_text() == "x" and not os.path.exists(out)
    assert os.listdir(tmp_path) == ["README.md"]  # (the probe directory is gone)


def test_train_overwrite_contradicts_resume(tmp_path, capsys):
    out = tmp_path / "run"
    code, err = run_cli(train.main, ["--output-dir", str(out), "--overwrite", "--resume", "auto"], capsys)
    assert_one_error_line(code, err, "--overwrite", "--resume auto")
    assert not out.exists()


def test_a_directory_given_as_a_file_and_a_file_as_a_directory(tiny_model_path, tmp_path, capsys):
    """--train-data DIR: a directory, not a data file (not 'unsupported file type'); --model FILE: a file, not a
    model directory (not 'no such directory')."""
    out = tmp_path / "run"
    for flag in ("--train-data", "--eval-data"):
        code, err = run_cli(train.main, ["--output-dir", str(out), flag, str(tmp_path) + "/"], capsys)
        assert_one_error_line(code, err, str(tmp_path), "a directory, not a data file")
    code, err = run_cli(train.main, ["--output-dir", str(out), "--reward", "code", "--train-data", str(tmp_path)], capsys)
    assert_one_error_line(code, err, str(tmp_path), "a directory, not a data file")
    config_file = os.path.join(tiny_model_path, "config.json")
    code, err = run_cli(train.main, ["--output-dir", str(out), "--model", config_file, "--eval-problems", "4"], capsys)
    assert_one_error_line(code, err, "--model", config_file, "a file, not a model directory")
    assert not out.exists()


def test_evaluate_temperature_zero_names_its_own_flags(capsys):
    code, err = run_cli(evaluate.main, ["--temperature", "0"], capsys)
    assert_one_error_line(code, err, "--temperature", "--samples 0")
    assert "--eval-samples" not in err and "advantage" not in err


@pytest.mark.parametrize("model", ["runs/nope", "runs/defualt/checkpoint-40", "runs/nope/"])
def test_evaluate_mistyped_run_path_is_no_such_directory(model, tmp_path, monkeypatch, capsys):
    """A relative path under a local directory is a path, not a hub name: 'no such directory' with what is there
    (not 'hf download runs/...'), and the error line alone (the settings line comes after the model's checks)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "default").mkdir(parents=True)
    code, err = run_cli(evaluate.main, ["--model", model, "--eval-problems", "4"], capsys)
    assert_one_error_line(code, err, f"--model {model!r}: no such directory", "runs/ holds: default")
    assert "hf download" not in err


def test_evaluate_bad_model_directory_is_one_line(tmp_path, capsys):
    (tmp_path / "m").mkdir()
    code, err = run_cli(evaluate.main, ["--model", str(tmp_path / "m"), "--eval-problems", "4"], capsys)
    assert_one_error_line(code, err, "--model", "no config.json")  # no "evaluating ..." line before it


def test_course_notebooks_without_the_test_extras():
    """`python course/notebooks.py` without nbformat (the test extras): one line naming the install command."""
    code = ("import runpy, sys\nsys.modules['nbformat'] = None\nsys.argv = ['course/notebooks.py', '01']\n"
            "runpy.run_path('course/notebooks.py', run_name='__main__')\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.strip() == (
        "error: the nbformat package is not installed (the course's notebooks run with the test extras: "
        "pip install -e '.[test]')"), r.stderr
