"""Code problems: the schema the code reward reads (normalize_problem: our `tests` or TACO/APPS `input_output`), read
from a JSONL file with one error line per bad row (load_code_problems), and as a run's Examples (load_code_dataset).
"""
from __future__ import annotations

import json
import os

from data import DataError, Example, level_and_pass_rate


class CodeDataError(ValueError):
    """Bad problem data; the message names the file, line and field."""


def normalize_problem(problem: dict) -> dict:
    """Canonical form: {"question", "tests": [{"input": str, "output": str, "level": int}], "fn_name"}.

    Accepts our schema and the TACO/APPS `input_output` one. Raises ValueError naming the field.
    """
    if "tests" in problem:
        tests, fn_name = problem["tests"], problem.get("fn_name")
        if not isinstance(tests, list):
            raise ValueError("field 'tests' must be a list")
    elif "input_output" in problem:
        io = problem["input_output"]
        if isinstance(io, str):
            try:
                io = json.loads(io)
            except json.JSONDecodeError as e:
                raise ValueError(f"field 'input_output' is not valid JSON ({e.msg})") from None
        if not isinstance(io, dict) or "inputs" not in io or "outputs" not in io:
            raise ValueError("field 'input_output' must hold 'inputs' and 'outputs'")
        if len(io["inputs"]) != len(io["outputs"]):
            raise ValueError("field 'input_output': 'inputs' and 'outputs' differ in length")
        fn_name = problem.get("fn_name") or io.get("fn_name")
        tests = [{"input": i, "output": o} for i, o in zip(io["inputs"], io["outputs"])]
    else:
        raise ValueError("missing field 'tests' (or 'input_output')")
    if not tests:
        raise ValueError("field 'tests' is empty")
    levels = problem.get("test_levels")
    if levels is not None and len(levels) != len(tests):
        raise ValueError(f"field 'test_levels' has {len(levels)} entries for {len(tests)} tests")
    out = []
    for i, t in enumerate(tests):
        if not isinstance(t, dict):
            raise ValueError(f"test {i}: must be an object")
        for k in ("input", "output"):
            if k not in t:
                raise ValueError(f"test {i}: missing field '{k}'")
        level = t.get("level", levels[i] if levels is not None else 1)
        if not isinstance(level, int) or isinstance(level, bool) or level < 1:
            raise ValueError(f"test {i}: field 'level' must be an integer >= 1, got {level!r}")
        out.append({"input": _as_text(t["input"], fn_name), "output": _as_text(t["output"], fn_name),
                    "level": level})
    norm = dict(problem)
    norm.update(tests=out, fn_name=fn_name)
    norm.pop("input_output", None)
    return norm


def _as_text(x, fn_name):
    """Test inputs/outputs as strings. TACO sometimes stores stdin/stdout tests as lists of lines
    and call tests as JSON values (argument lists, return values) rather than JSON text."""
    if isinstance(x, str):
        return x
    return "\n".join(map(str, x)) if fn_name is None else json.dumps(x)


def load_code_problems(path: str) -> list[dict]:
    """Read a JSONL of problems and normalise them. Errors read like `file.jsonl:3: missing field 'tests'`."""
    if not os.path.exists(path):
        raise CodeDataError(f"{path}: no such file")
    if os.path.isdir(path):
        raise CodeDataError(f"{path}: a directory, not a data file (.jsonl)")
    problems = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise CodeDataError(f"{path}:{lineno}: invalid JSON ({e.msg})") from None
            try:
                if not isinstance(row, dict):
                    raise ValueError("a problem must be a JSON object")
                if not isinstance(row.get("question"), str):
                    raise ValueError("missing field 'question'")
                level_and_pass_rate(row)  # a graded file's difficulty / pass_rate, checked here for the line number
                problems.append(normalize_problem(row))
            except ValueError as e:
                raise CodeDataError(f"{path}:{lineno}: {e}") from None
    if not problems:
        raise CodeDataError(f"{path}: no problems")
    return problems


def load_code_dataset(path: str) -> list[Example]:
    """Code problems (question, tests or TACO-style input_output, optional fn_name; see normalize_problem).

    The Example's `answer` is the normalised problem itself: the code reward (coding/code_reward.py) runs its tests.
    Its `level` and `pass_rate` are read as for math rows (level_and_pass_rate): tools/grade.py's `difficulty` wins over a
    `level` field (the built-in code task's own level, as tools/grade.py writes it).
    """
    try:
        problems = load_code_problems(path)
    except CodeDataError as e:
        raise DataError(str(e)) from None
    out = []
    for p in problems:
        level, pass_rate = level_and_pass_rate(p)
        out.append(Example(prompt=p["question"], answer=p, level=level, pass_rate=pass_rate, meta={"kind": "code"}))
    return out
