"""The house: the top level holds the idea files, every benchmark runs as `python bench/NAME.py`, the README's map
lists what is there, and imports run one way (algorithm files <- data <- rewards/rollout <- the loop).

Run:  python -m pytest -q tests/test_layout.py        (~20 s: each benchmark's --help is a subprocess)
"""
import ast
import glob
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALGORITHMS = ["grpo.py", "dapo.py", "c3po.py", "entropy.py", "resample.py", "curriculum.py"]
STDLIB_OK = {"torch", "math", "dataclasses", "typing", "random", "collections", "itertools", "functools", "__future__",
             "enum", "heapq", "bisect"}


def project_imports(path: str) -> set[str]:
    """Top-level names of the modules a file imports."""
    names = set()
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_top_level_is_the_idea_files():
    tops = sorted(os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "*.py")))
    assert len(tops) <= 18, tops
    readme = open(os.path.join(ROOT, "README.md")).read()
    files = readme[readme.index("## Files"):readme.index("## The loop")]
    for f in tops + [os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "bench", "*.py"))]:
        assert os.path.basename(f) in files, f"{f} is not in the README's map"
    for name in re.findall(r"^(\w+\.py)\s", files, re.M):
        assert os.path.exists(os.path.join(ROOT, name)), f"the README's map lists {name}, which is not there"


def test_imports_run_downward():
    modules = {os.path.basename(p)[:-3] for p in glob.glob(os.path.join(ROOT, "*.py"))} | {"coding"}
    for f in ALGORITHMS:
        assert project_imports(os.path.join(ROOT, f)) <= STDLIB_OK, f
    assert not project_imports(os.path.join(ROOT, "data.py")) & modules, "data.py imports no project module"
    for f in ["reward.py", "rollout.py", *glob.glob(os.path.join(ROOT, "coding", "*.py"))]:
        up = project_imports(os.path.join(ROOT, f)) & (modules - {"data", "coding"})
        assert not up, f"{f} imports {up}"
    for f in ["grade.py", "evaluate.py", "seamless.py", "tiny.py", "reward.py", "rollout.py", "data.py"]:
        assert "train" not in project_imports(os.path.join(ROOT, f)), f"{f} reaches up into train.py"


def test_train_functions_are_readable():
    for node in ast.parse(open(os.path.join(ROOT, "train.py")).read()).body:
        if isinstance(node, ast.FunctionDef):
            n = node.end_lineno - node.lineno + 1
            assert n <= (130 if node.name == "train" else 80), f"train.{node.name} is {n} lines"  # train: the loop


@pytest.mark.parametrize("script", sorted(glob.glob(os.path.join(ROOT, "bench", "*.py"))))
def test_bench_script_help(script):
    r = subprocess.run([sys.executable, script, "--help"], capture_output=True, text=True, cwd="/", timeout=300)
    assert r.returncode == 0 and "usage" in r.stdout.lower(), r.stderr[-2000:]


def test_diff_grpo_dapo_is_dapos_change_list():
    """`diff grpo.py dapo.py` shows DAPO's changes and nothing else: past the module docstrings (which differ
    wholesale: each describes its own paper), every hunk carries a `DAPO change` marker on dapo.py's side."""
    import difflib

    def body(name):
        lines = open(os.path.join(ROOT, name)).read().splitlines()
        end = next(i for i, line in enumerate(lines) if i > 0 and line.rstrip().endswith('"""'))
        return lines[end + 1:]

    g, d = body("grpo.py"), body("dapo.py")
    hunks = [op for op in difflib.SequenceMatcher(None, g, d, autojunk=False).get_opcodes() if op[0] != "equal"]
    assert hunks, "dapo.py changes nothing?"
    for tag, i1, i2, j1, j2 in hunks:
        assert any("DAPO change" in line for line in d[j1:j2]), f"hunk without a DAPO change marker:\n" + "\n".join(
            ["- " + x for x in g[i1:i2]] + ["+ " + x for x in d[j1:j2]])
