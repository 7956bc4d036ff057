"""Every value a user can type is checked: each numeric flag of train.py, evaluate.py and the tools has its range,
and a bad value ends in one `error:` line naming the flag, exit code 2, before anything is written.

The table below lists bad values per train.py flag; every int flag also gets '1.5' and every float flag 'nan' and
'inf'. A numeric flag added to config.Config without an entry here fails test_every_numeric_flag_has_bad_values.

Run:  python -m pytest -q tests/test_flags.py        (~30 s)
"""
import dataclasses
import os

import pytest

import config
import evaluate
import train
from engines.stops import read_stops
from tools.cli import cli

BAD = {  # train.py: field -> values that must be refused
    "train_problems": ["-1"], "max_steps": ["0", "-3"], "seed": ["-1"], "save_every": ["-1"], "keep_checkpoints": ["-1"],
    "rollout_lag": ["2", "-1"], "batch_size": ["0", "-8", "12"], "group_size": ["1", "0"],
    "temperature": ["0", "-1"], "top_p": ["0", "1.5", "-0.5"], "max_new_tokens": ["0", "-1"],
    "vllm_gpu_memory_utilization": ["0", "1.5"], "tis_cap": ["-1", "0.5"], "reward_timeout": ["0", "-1"],
    "reward_workers": ["-1"], "correct_reward": ["-5"], "wrong_reward": ["2"], "clip_low": ["-0.1", "1.5"],
    "clip_high": ["-0.1"], "dual_clip": ["0.5", "-1"], "kl_coef": ["-1"], "lr": ["-1", "-1e-4"], "warmup_steps": ["-1"],
    "weight_decay": ["-1"], "grad_clip": ["0", "-1"], "mini_batch_size": ["0", "-1", "3"], "epochs": ["0"],
    "gen_batch_factor": ["0"], "seamless_max_wave": ["-1"], "overlong_buffer": ["-1", "64"], "token_budget": ["-1"],
    "entropy_coef": ["-1"], "entropy_target": ["0"], "entropy_delta": ["-1"], "entropy_max": ["-1"],
    "easy_pool_alpha": ["-0.1", "1"], "micro_batch_size": ["0"], "micro_batch_tokens": ["-1"], "logprob_chunk": ["-1"],
    "threads": ["-1"], "lora_rank": ["-1"], "lora_alpha": ["0"], "lora_dropout": ["-0.1", "1"], "eval_every": ["-1"],
    "eval_problems": ["-5"], "eval_samples": ["-1"], "eval_temperature": ["0", "-1"], "eval_top_p": ["0", "1.5"],
}
ANY = {"max_gen_rounds"}  # every int is meaningful (<= 0: no cap on the rounds)


def numeric_fields():
    return [f for f in dataclasses.fields(config.Config) if f.type in ("int", "float", int, float)]


def cases():
    for f in numeric_fields():
        extra = ["1.5"] if f.type in ("int", int) else ["nan", "inf", "-inf"]
        for v in BAD.get(f.name, []) + extra:
            yield f.name, v


def one_error_line(err: str, flag: str) -> bool:
    return err.count("\n") == 1 and err.startswith("error: ") and flag in err


def test_every_numeric_flag_has_bad_values():
    missing = [f.name for f in numeric_fields() if f.name not in BAD and f.name not in ANY]
    assert not missing, f"flags with no bad values in tests/test_flags.py BAD: {missing}"
    assert not set(BAD) - {f.name for f in numeric_fields()}  # no stale entries


@pytest.mark.parametrize("name,value", list(cases()))
def test_train_refuses_a_bad_value(name, value, tmp_path, capsys):
    out = tmp_path / "run"
    flag = "--" + name.replace("_", "-")
    code = cli(train.main, ["--output-dir", str(out), f"{flag}={value}"])
    err = capsys.readouterr().err
    assert code == 2 and one_error_line(err, flag), (flag, value, err)
    assert not out.exists()  # nothing written


def test_train_refuses_bad_paths_and_a_missing_engine(tmp_path, capsys, monkeypatch):
    f = tmp_path / "a-file"
    f.write_text("x")
    assert cli(train.main, ["--output-dir", str(f)]) == 2
    assert one_error_line(capsys.readouterr().err, "--output-dir") and f.read_text() == "x"
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a))
    out = tmp_path / "run"
    assert cli(train.main, ["--output-dir", str(out), "--rollout", "vllm"]) == 2
    err = capsys.readouterr().err
    assert one_error_line(err, "--rollout") and "not installed" in err and not out.exists()


def test_a_batch_below_the_mini_batch_default_is_one_mini_batch():
    """docs/multi_gpu.md's `--batch-size 16 --group-size 4`: the mini-batch default (256) follows the batch (mu = 1);
    one given is kept and checked; a recipe's mini-batch (dapo: 16 of 256) still divides a smaller batch."""
    assert config.parse_config(["--batch-size", "16", "--group-size", "4"]).mini_batch_size == 16
    assert config.parse_config(["--batch-size", "16", "--group-size", "4", "--mini-batch-size", "8"]).mini_batch_size == 8
    assert config.parse_config(["--recipe", "dapo", "--batch-size", "32"]).mini_batch_size == 16
    assert config.parse_config(["--recipe", "dapo", "--batch-size", "8", "--group-size", "4"]).mini_batch_size == 8
    with pytest.raises(SystemExit, match="error: --mini-batch-size: 32 does not divide --batch-size 16"):
        config.parse_config(["--batch-size", "16", "--group-size", "4", "--mini-batch-size", "32"])


def test_stop_reads_only_the_escapes_it_names():
    assert read_stops("\\boxed") == ("\\boxed",)  # not a backspace and 'oxed'
    assert read_stops("</answer>||\\nUser:||a\\tb||\\\\n") == ("</answer>", "\nUser:", "a\tb", "\\n")
    assert config.parse_config(["--stop", "\\boxed{||\\n\\n"]).stops == ("\\boxed{", "\n\n")
    assert read_stops("") == ()


EVALUATE_BAD = [("--eval-problems", "-5"), ("--samples", "-1"), ("--temperature", "0"), ("--temperature", "nan"),
                ("--top-p", "0"), ("--top-p", "1.5"), ("--max-new-tokens", "0"), ("--seed", "-1"), ("--k", "0"),
                ("--k", "x"), ("--samples", "1.5"), ("--threads", "-1"), ("--threads", "1.5")]


@pytest.mark.parametrize("flag,value", EVALUATE_BAD)
def test_evaluate_refuses_a_bad_value(flag, value, tmp_path, capsys):
    out = tmp_path / "res.json"
    code = cli(evaluate.main, [f"{flag}={value}", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and one_error_line(err, flag), err
    assert not out.exists()


def test_evaluate_refuses_bad_paths(tmp_path, capsys):
    f = tmp_path / "a-file"
    f.write_text("x")
    assert cli(evaluate.main, ["--model", str(f)]) == 2
    assert one_error_line(capsys.readouterr().err, "--model")
    assert cli(evaluate.main, ["--out", str(tmp_path)]) == 2
    assert one_error_line(capsys.readouterr().err, "--out")


GRADE_BAD = [("--samples", "0"), ("--n", "-1"), ("--seed", "-1"), ("--temperature", "0"), ("--temperature", "inf"),
             ("--top-p", "1.5"), ("--max-new-tokens", "0"), ("--batch-prompts", "0"), ("--reward-workers", "-1"),
             ("--reward-timeout", "0"), ("--reward-timeout", "nan"), ("--threads", "-1")]
TINY_BAD = [("--sft-steps", "0"), ("--sft-lr", "0"), ("--sft-lr", "nan"), ("--sft-direct-frac", "1.5"), ("--seed", "-1"),
            ("--hidden", "x")]


@pytest.mark.parametrize("flag,value", GRADE_BAD)
def test_grade_refuses_a_bad_value(flag, value, tmp_path, capsys):
    from tools import grade

    out = tmp_path / "graded.jsonl"
    code = cli(grade.main, ["grade", "--data", "builtin", "--out", str(out), f"{flag}={value}"])
    err = capsys.readouterr().err
    assert code == 2 and one_error_line(err, flag), err
    assert not out.exists() and not os.path.exists(str(out) + ".partial.jsonl")


@pytest.mark.parametrize("flag,value", TINY_BAD)
def test_tiny_refuses_a_bad_value(flag, value, tmp_path, capsys):
    from tools import tiny

    code = cli(tiny.main, ["--cache-dir", str(tmp_path / "cache"), f"{flag}={value}"])
    err = capsys.readouterr().err
    assert code == 2 and one_error_line(err, flag), err
    assert not (tmp_path / "cache").exists()


def test_lora_merge_refuses_bad_paths(tmp_path, capsys):
    from trainer import lora

    out = tmp_path / "merged"
    assert cli(lora.main, ["--merge", str(tmp_path), "--out", str(out)]) == 2
    assert one_error_line(capsys.readouterr().err, "--merge") and not out.exists()
    assert cli(lora.main, ["--merge", str(tmp_path)]) == 2  # argparse: one line, not usage + message
    assert one_error_line(capsys.readouterr().err, "--out")


@pytest.mark.parametrize("recipe", list(config.RECIPES))
def test_every_recipe_passes_the_checks(recipe):
    """A recipe's values are flags' values too: each lies in its flag's range (cispo's eps_low = 1, no floor)."""
    cfg = config.parse_config(["--recipe", recipe])
    assert cfg.recipe == recipe


def test_progress_bars_in_a_log_file_are_lines(capsys):
    """Where stderr is a file or a pipe (here: pytest's capture) a progress bar writes plain lines, no carriage
    returns that would make a log one unreadable line."""
    import runs

    bar = runs.progress_bar(range(3), desc="steps")
    for _ in bar:
        bar.set_postfix(acc="0.5")
    bar.close()
    err = capsys.readouterr().err
    assert "\r" not in err and "\x1b" not in err and "3/3" in err.splitlines()[-1]


def test_evaluate_help_names_each_default_once(capsys):
    with pytest.raises(SystemExit):
        evaluate.main(["--help"])
    out = capsys.readouterr().out
    assert "(default: None)" not in out and "(default: )" not in out and "default: the run's, else 400" in out
