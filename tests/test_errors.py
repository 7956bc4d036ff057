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
