"""config.py is the flags and the recipes: no import circle through it, one declaration per flag (its group, help,
check, resume rule and place in --help: adding a flag is one edit), --help opening with the flags a first run uses,
and a run's saved settings read as this version writes them (an earlier version's: one error line).

Run:  python -m pytest -q tests/test_config.py          (~20 s)
"""
import ast
import dataclasses
import json
import os
import subprocess
import sys

import pytest

import config
import runs
import train
from tools.cli import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUTSIDE = {".venv", ".git", "tests", "runs", "models", "fixtures", "docs", "configs", "course"}


def project_modules() -> dict[str, str]:
    """Every module of the project (dotted name -> file), the tests and run data aside."""
    out = {}
    for d, dirs, files in os.walk(ROOT):
        dirs[:] = [x for x in dirs if x not in OUTSIDE and not x.startswith(".") and not x.endswith(".egg-info")]
        for f in files:
            if f.endswith(".py"):
                name = os.path.relpath(os.path.join(d, f), ROOT)[:-3].replace(os.sep, ".")
                out[name.removesuffix(".__init__")] = os.path.join(d, f)
    return out


def imports_of(path: str, modules) -> set[str]:
    """The project modules a file imports anywhere in it (a function's import too: it closes a circle as well)."""
    found = set()
    for node in ast.walk(ast.parse(open(path).read())):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name:
                found.add(name)
    return found


def test_no_import_circle():
    """No chain of imports, module-level or inside a function, leads from a project module back to itself."""
    modules = project_modules()
    graph = {m: imports_of(p, modules) - {m} for m, p in modules.items()}
    assert {"config", "runs", "trainer.checks", "trainer.stages", "tools.tiny"} <= set(graph)
    state, path = {}, []

    def visit(m):
        state[m] = "open"
        path.append(m)
        for n in sorted(graph[m]):
            assert state.get(n) != "open", "import circle: " + " -> ".join(path[path.index(n):] + [n])
            if n not in state:
                visit(n)
        path.pop()
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m)


def test_config_imports_alone():
    """`import config` in a fresh interpreter: it loads neither train.py nor the trainer's set-up."""
    code = "import sys, config; print(' '.join(sorted(m for m in sys.modules if m in ('train', 'trainer.setup'))))"
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "", r.stderr[-2000:]


def test_help_opens_with_the_core_flags_and_keeps_every_text():
    text = config.build_parser().format_help()
    core = [f for f in dataclasses.fields(config.Config) if f.metadata["core"]]
    assert 20 <= len(core) <= 30
    first = text.index("\n" + config.CORE + ":")
    assert first < min(text.index("\n" + g + ":") for g in config.GROUPS)
    for name in ("model", "train-data", "reward", "recipe", "algorithm", "batch-size", "group-size", "max-new-tokens",
                 "lr", "max-steps", "output-dir", "resume", "seed", "dtype", "threads", "rollout", "eval-every",
                 "eval-problems", "eval-samples", "lora-rank"):
        assert f"\n  --{name} " in text[first:text.index("\n" + config.GROUPS[0] + ":")], name
    flat = "".join(text.split())  # (argparse wraps lines at spaces and hyphens)
    for f in dataclasses.fields(config.Config):
        assert "".join(f.metadata["help"].split()) in flat, f.name


def config_with(line: str):
    """config.py with one line added to Config (a new flag), loaded as a module of its own."""
    src = open(os.path.join(ROOT, "config.py")).read()
    anchor = "    # --- evaluation and logging ---\n"
    assert src.count(anchor) == 1
    import types

    mod = types.ModuleType("config_plus")
    sys.modules["config_plus"] = mod  # (dataclasses look the module up)
    try:
        exec(compile(src.replace(anchor, anchor + line + "\n"), "config_plus.py", "exec"), mod.__dict__)
    finally:
        del sys.modules["config_plus"]
    return mod


@pytest.mark.parametrize("rule", ["free", "checked", "fixed"])
def test_adding_a_flag_is_one_edit(rule, tmp_path, capsys):
    """One declaration, and the flag is on the command line and in --help (its group, its text and default), checked,
    recorded in the run's settings, and follows its resume rule; nothing else is edited."""
    mod = config_with(f'    extra_knob: int = flag(EVAL, 3, "a flag added in one edit", check=at_least(1), '
                      f'resume="{rule}")')
    text = mod.build_parser().format_help()
    assert "--extra-knob EXTRA_KNOB" in text[text.index("\n" + mod.EVAL + ":"):]
    assert "a flag added in one edit (default: 3)" in text
    out = str(tmp_path / "run")
    assert mod.parse_config(["--output-dir", out]).extra_knob == 3
    assert mod.parse_config(["--output-dir", out, "--extra-knob", "5"]).extra_knob == 5
    with pytest.raises(SystemExit, match="^error: --extra-knob: must be >= 1, got 0$"):
        mod.parse_config(["--output-dir", out, "--extra-knob", "0"])
    # a run stopped before its first checkpoint: --resume auto reads its config.json and applies the flag's rule
    os.makedirs(out)
    saved = dataclasses.asdict(mod.parse_config(["--output-dir", out, "--max-steps", "7"]))
    json.dump({**saved, "model": "", "machine": runs.machine()}, open(os.path.join(out, "config.json"), "w"))
    resume = ["--output-dir", out, "--resume", "auto", "--extra-knob", "4"]
    if rule == "free":
        cfg = mod.parse_config(resume)
        assert (cfg.extra_knob, cfg.max_steps, cfg.overwrite) == (4, 7, True)
    else:
        with pytest.raises(SystemExit, match=r"--extra-knob 4 \(the run: 3\)"):
            mod.parse_config(resume)
        if rule == "fixed":
            with pytest.raises(SystemExit, match=r"--extra-knob 4 \(the run: 3\)"):
                mod.parse_config(resume + ["--resume-override"])
        else:
            assert mod.parse_config(resume + ["--resume-override"]).extra_knob == 4
            assert "warning: --resume-override: --extra-knob 4 replaces the run's 3" in capsys.readouterr().err
    # the settings of a run from before the flag: one error line naming it
    json.dump({k: v for k, v in saved.items() if k != "extra_knob"}, open(os.path.join(out, "config.json"), "w"))
    with pytest.raises(SystemExit, match="from an earlier version of train.py, one without --extra-knob"):
        mod.parse_config(["--output-dir", out, "--resume", "auto"])


def test_resume_rules_are_the_flags_own():
    """Each flag's resume rule is declared with it; runs.py keeps no list of flag names."""
    rules = {f.name: f.metadata["resume"] for f in dataclasses.fields(config.Config)}
    by_rule = {r: {k for k, rule in rules.items() if rule == r} for r in runs.RESUME_RULES}
    assert by_rule["free"] >= {"max_steps", "output_dir", "resume", "threads", "save_every"}
    assert by_rule["fixed"] >= {"model", "recipe", "train_data", "seed", "eval_problems"}
    assert rules["lr"] == rules["clip_high"] == "checked"
    assert not [k for k, v in vars(runs).items() if isinstance(v, (set, frozenset)) and {"max_steps", "seed"} & v]


def test_an_earlier_versions_run_is_one_error_line(tmp_path, capsys):
    """A run directory whose config.json lacks a flag, or a checkpoint without run_config.json, is an earlier
    version's: one `error:` line naming what it lacks, exit 2, nothing written."""
    out = tmp_path / "run"
    out.mkdir()
    saved = dataclasses.asdict(config.parse_config(["--output-dir", str(out)]))
    del saved["algorithm"], saved["draw"]
    (out / "config.json").write_text(json.dumps(saved))
    before = sorted(os.listdir(out))
    code = cli(train.main, ["--output-dir", str(out), "--resume", "auto"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith(f"error: --resume auto ({out}/config.json): ")
    assert "from an earlier version of train.py, one without --draw, --algorithm" in err
    ck = out / "checkpoint-2"
    ck.mkdir()
    (ck / "trainer_state.pt").write_bytes(b"")
    (ck / "config.json").write_text("{}")
    code = cli(train.main, ["--output-dir", str(out), "--resume", str(ck)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "no run_config.json: a checkpoint of an earlier version" in err
    assert sorted(os.listdir(out)) == sorted(before + ["checkpoint-2"])
