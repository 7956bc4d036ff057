"""The house: the top level holds the idea files and the few a first reader opens (plumbing lives in trainer/, the
offline tools in tools/), every benchmark runs as `python bench/NAME.py`, the file map (docs/files.md, linked from the
README) lists what is there, imports run one way (algorithm files <- data <- rewards/rollout <- trainer/ <- the
loop), train.py reads top down as the loop, and every flag is declared once, in config.py. The support files hold
one idea each: reward.py's parts in verifier/, the engines behind rollout.py in engines/, the built-in tasks, --data
and the templates in tasks/.

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
ALGORITHMS = ["grpo.py", "dapo.py", "c3po.py", "gspo.py", "cispo.py", "entropy.py", "resample.py", "curriculum.py"]
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


PACKAGES = ["trainer", "tools", "coding", "tasks", "engines", "verifier"]  # the loop's plumbing; offline tools (and the
# scripts' error exit, cli.py); the code task; built-in tasks, --data and templates; rollout.py's engines; reward.py's parts


def test_top_level_is_the_idea_files():
    tops = sorted(os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "*.py")))
    assert len(tops) <= 17, tops
    assert set(ALGORITHMS) <= set(tops), "the algorithm files stay at the top level"
    readme = open(os.path.join(ROOT, "README.md")).read()
    assert "](docs/files.md)" in readme, "the README links the file map"
    doc = open(os.path.join(ROOT, "docs", "files.md")).read()
    files = doc[doc.index("## Files"):doc.index("## The loop")]
    inside = [os.path.relpath(p, ROOT) for d in PACKAGES for p in glob.glob(os.path.join(ROOT, d, "*.py"))
              if not p.endswith("__init__.py")]
    for f in tops + inside + [os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "bench", "*.py"))]:
        assert os.path.basename(f) in files, f"{f} is not in docs/files.md's map"
    for name in re.findall(r"^([\w/]+\.py)\s", files, re.M):
        assert os.path.exists(os.path.join(ROOT, name)), f"docs/files.md's map lists {name}, which is not there"
    for d in PACKAGES:  # each package's own map names its files
        doc = open(os.path.join(ROOT, d, "__init__.py")).read()
        for p in glob.glob(os.path.join(ROOT, d, "*.py")):
            assert p.endswith("__init__.py") or os.path.basename(p) in doc, f"{p} is not in {d}/__init__.py's map"


def test_imports_run_downward():
    modules = {os.path.basename(p)[:-3] for p in glob.glob(os.path.join(ROOT, "*.py"))} | set(PACKAGES)
    files = lambda d: glob.glob(os.path.join(ROOT, d, "*.py"))  # noqa: E731
    for f in ALGORITHMS:
        assert project_imports(os.path.join(ROOT, f)) <= STDLIB_OK, f
    assert not project_imports(os.path.join(ROOT, "data.py")) & modules, "data.py imports no project module"
    # one level up: the code task, the built-in tasks and templates, the engines, the reward's parts (each on data.py at
    # most, besides its own package; the code task's command line also runs under tools/cli.py, which is on data.py;
    # Countdown's reward reads the thought as the math reward does, verifier/extract.py)
    below = {"verifier": set(), "engines": {"data"}, "coding": {"data", "tools"}, "tasks": {"data", "coding", "verifier"}}
    for d, allowed in below.items():
        for f in files(d):
            up = project_imports(f) & (modules - allowed - {d})
            assert not up, f"{f} imports {up}"
    assert project_imports(os.path.join(ROOT, "tools", "cli.py")) & modules <= {"data"}, "tools/cli.py is on data.py only"
    for f in ["reward.py", "rollout.py"]:  # the entry points of steps 2 and 3, on those
        up = project_imports(os.path.join(ROOT, f)) & (modules - {"data", "coding", "tasks", "engines", "verifier"})
        assert not up, f"{f} imports {up}"
    plumbing = [f for d in PACKAGES for f in files(d)]
    for f in ["evaluate.py", "seamless.py", "reward.py", "rollout.py", "data.py", "config.py", "runs.py", *plumbing]:
        assert "train" not in project_imports(os.path.join(ROOT, f)), f"{f} reaches up into train.py"


def test_train_py_reads_top_down_as_the_loop():
    """train.py: at most 700 lines, the loop (`train`) within its first 250 and before every step's function, no
    function over 60 lines; its docstring names the six steps and what the file leaves out."""
    src = open(os.path.join(ROOT, "train.py")).read()
    assert src.count("\n") <= 700
    tree = ast.parse(src)
    funcs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    for node in funcs:
        n = node.end_lineno - node.lineno + 1
        assert n <= 60, f"train.{node.name} is {n} lines"
    loop = next(n for n in funcs if n.name == "train")
    assert loop.end_lineno <= 250 and all(n.lineno > loop.lineno for n in funcs if n.name not in ("main", "train"))
    doc = ast.get_docstring(tree)
    for k in range(1, 7):
        assert f"\n  {k}. " in doc, f"step {k} is not named in train.py's docstring"
    assert "leaves out" in doc
    assert not [n for n in tree.body if isinstance(n, ast.ClassDef)], "records and plumbing classes live in trainer/"


def test_every_flag_is_declared_once():
    """Each Config field carries its --help group, help text, choices, check and resume rule; --help shows the core
    fields first, then every other field under its group, in config.GROUPS order."""
    import dataclasses

    import config
    import runs

    fields = dataclasses.fields(config.Config)
    for f in fields:
        m = f.metadata
        assert m["group"] in config.GROUPS and m["help"] and m["resume"] in runs.RESUME_RULES, f.name
        assert m["choices"] is None or f.default in m["choices"], f.name
    text = config.build_parser().format_help()
    titles = (config.CORE, *config.GROUPS)
    at = [text.index("\n" + g + ":") for g in titles] + [len(text)]
    assert at == sorted(at), "--help shows the core flags, then the groups in config.GROUPS order"
    for f in fields:
        k = titles.index(config.CORE if f.metadata["core"] else f.metadata["group"])
        assert re.search(r"\n  --" + f.name.replace("_", "-") + r"[ ,\n]", text[at[k]:at[k + 1]]), f.name


def test_help_strings_fit_120_columns():
    """Every line of every flag's declaration in config.py (its help text above all) is at most 120 characters: a help
    text longer than a line is written as several literals, one a line."""
    src = open(os.path.join(ROOT, "config.py")).read()
    lines = src.splitlines()
    cls = next(n for n in ast.parse(src).body if isinstance(n, ast.ClassDef) and n.name == "Config")
    flags = [n for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.value, ast.Call)
             and getattr(n.value.func, "id", None) == "flag"]
    assert len(flags) > 50
    long = [(i + 1, len(lines[i])) for n in flags for i in range(n.lineno - 1, n.end_lineno) if len(lines[i]) > 120]
    assert not long, f"config.py lines over 120 characters in flag declarations (line, length): {long}"


@pytest.mark.parametrize("script", sorted(glob.glob(os.path.join(ROOT, "bench", "*.py"))))
def test_bench_script_help(script):
    r = subprocess.run([sys.executable, script, "--help"], capture_output=True, text=True, cwd="/", timeout=300)
    assert r.returncode == 0 and "usage" in r.stdout.lower(), r.stderr[-2000:]


@pytest.mark.parametrize("name, paper", [("dapo.py", "DAPO"), ("c3po.py", "C3PO"), ("gspo.py", "GSPO"),
                                         ("cispo.py", "CISPO")])
def test_diff_grpo_is_the_papers_change_list(name, paper):
    """`diff grpo.py dapo.py` shows DAPO's changes and nothing else: past the module docstrings (which differ
    wholesale: each describes its own paper), every hunk carries a `DAPO change` marker on dapo.py's side; the same
    for c3po.py (`C3PO change`), gspo.py (`GSPO change`) and cispo.py (`CISPO change`), or, unnumbered, `CISPO choice`
    where the file departs from grpo.py on its own account (the paper makes no such change). Each states its paper's
    settings in `PAPER` (a marked hunk where they differ from GRPO's). grpo.token_logprobs is not copied (the trainer
    computes every recipe's log-probs with it): the hunk that leaves it out is marked `change 0` in each file."""
    import difflib

    def body(name):
        lines = open(os.path.join(ROOT, name)).read().splitlines()
        end = next(i for i, line in enumerate(lines) if i > 0 and line.rstrip().endswith('"""'))
        return lines[end + 1:]

    g, d = body("grpo.py"), body(name)
    assert "PAPER = dict(" in d and not any(line.startswith("def token_logprobs(") for line in d), name
    hunks = [op for op in difflib.SequenceMatcher(None, g, d, autojunk=False).get_opcodes() if op[0] != "equal"]
    assert hunks, f"{name} changes nothing?"
    for tag, i1, i2, j1, j2 in hunks:
        assert any(f"{paper} change" in line or f"{paper} choice" in line for line in d[j1:j2]), \
            f"hunk without a {paper} change marker:\n" + "\n".join(
            ["- " + x for x in g[i1:i2]] + ["+ " + x for x in d[j1:j2]])
