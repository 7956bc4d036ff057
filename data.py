"""Data: the Example record every source of problems yields, and the loaders of the common math schemas.

  * Loaders for local JSONL / JSON / Parquet files (and hub names when `datasets` is installed) that map
    the common schemas to (prompt, answer):
        gsm8k      question, answer ending in "#### N"
        math       problem, solution with \\boxed{...}  (an `answer` field wins when present: MATH-500)
        dapo       prompt (string or chat messages), reward_model.ground_truth   (DAPO-Math-17k)
        aime       problem, answer
        plain      prompt, answer                         (what `tools/grade.py` and this project write)
    Optional fields `difficulty` (1-5) and `pass_rate` are kept when present (offline grading, tools/grade.py).
  * Bad input stops with one error naming the file, line and field (DataError; tools/cli.py turns it into one
    `error:` line).
Where a run's problems come from (`--data`: a built-in task, a file, a hub name) is tasks/load.py; the built-in tasks
are in tasks/, the prompt templates in tasks/templates.py, the code problems' schema in coding/problems.py.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

# DAPO's own prompt (BytedTsinghua-SIA/DAPO README): the answer goes on a last line "Answer: ...", which
# reward.MathReward(mode="math-dapo") reads as DAPO's code does. DAPO-Math-17k stores each question inside it
# (row_to_example takes it out); tasks/templates.py builds it (--template dapo).
DAPO_TEMPLATE = ("Solve the following math problem step by step. The last line of your response should be of the form "
                 "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n{question}\n\n"
                 "Remember to put your answer on its own line after \"Answer:\".")


class DataError(ValueError):
    """Bad input data; the message names the file, line and field."""


@dataclass
class Example:
    prompt: str  # the problem statement (no template: tasks/templates.py builds the prompt)
    answer: str | dict  # gold answer, a string math-verify can parse; for code, the problem with its tests
    level: int | None = None  # difficulty 1-5 when known
    pass_rate: float | None = None  # measured pass rate when graded
    solution: str | None = None  # worked solution (built-in task only; used for the cold-start SFT)
    meta: dict = field(default_factory=dict)


_BOXED = "\\boxed"


def last_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...} in `text` (balanced braces), or None.

    `\\boxed 5` (LaTeX's brace-less argument, which MATH's `last_boxed_only_string` also reads) gives the token
    after the space, up to whitespace or `$`. Anything else after `\\boxed` (`\\boxedx`, `\\boxed.`) is no answer:
    a brace further on belongs to other text."""
    i = text.rfind(_BOXED)
    if i < 0:
        return None
    rest = text[i + len(_BOXED):]
    if not rest.lstrip().startswith("{"):
        if rest[:1] in (" ", "\t") and rest.split():
            return rest.split()[0].split("$")[0]
        return None
    j = i + len(_BOXED) + rest.index("{")
    depth = 0
    for k in range(j, len(text)):
        if text[k] == "{":
            depth += 1
        elif text[k] == "}":
            depth -= 1
            if depth == 0:
                return text[j + 1 : k]
    return None


def _chat_content(prompt) -> str:
    """DAPO-Math-17k stores the prompt as chat messages; take the (last) user turn."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        users = [m.get("content", "") for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        if users:
            return users[-1]
    raise ValueError("field 'prompt' is neither a string nor a list of chat messages with a user turn")


def detect_schema(row: dict) -> str:
    if "reward_model" in row and "prompt" in row:
        return "dapo"
    if "question" in row and "answer" in row:
        return "gsm8k"
    if "problem" in row and ("solution" in row or "answer" in row):
        return "math" if "solution" in row else "aime"
    if "prompt" in row and "answer" in row:
        return "plain"
    raise ValueError(
        f"unknown schema with fields {sorted(row)}; expected one of: gsm8k (question, answer '#### N'), "
        "math (problem, solution/answer), aime (problem, answer), dapo (prompt, reward_model.ground_truth), "
        "plain (prompt, answer)"
    )


def row_to_example(row: dict, schema: str | None = None) -> Example:
    """Map one row of a known schema to an Example; raises ValueError naming the field at fault."""
    if not isinstance(row, dict):
        raise ValueError(f"row is a {type(row).__name__}, expected an object")
    schema = schema or detect_schema(row)
    if schema == "gsm8k":
        q, a = row.get("question"), row.get("answer")
        if not isinstance(a, str) or "####" not in a:
            raise ValueError("field 'answer' has no '#### <final answer>' (GSM8K schema)")
        a = a.split("####")[-1].strip().replace(",", "")
    elif schema in ("math", "aime"):
        q = row.get("problem")
        a = row.get("answer")
        if a in (None, "") and isinstance(row.get("solution"), str):
            a = last_boxed(row["solution"])
            if a is None:
                raise ValueError("field 'solution' has no \\boxed{...} and there is no 'answer' field")
    elif schema == "dapo":
        q = _chat_content(row.get("prompt"))
        pre, post = DAPO_TEMPLATE.split("{question}")
        if isinstance(q, str) and q.startswith(pre) and q.endswith(post):  # DAPO-Math-17k stores the question inside
            q = q[len(pre):-len(post)]  # DAPO's template: the bare question, so that --template builds it once
        rm = row.get("reward_model")
        a = rm.get("ground_truth") if isinstance(rm, dict) else None
        if a in (None, ""):
            raise ValueError("field 'reward_model.ground_truth' is missing or empty (DAPO schema)")
    elif schema == "plain":
        q, a = row.get("prompt"), row.get("answer")
    else:
        raise ValueError(f"unknown schema {schema!r}")
    qname = {"gsm8k": "question", "dapo": "prompt", "plain": "prompt"}.get(schema, "problem")
    if not isinstance(q, str) or not q.strip():
        raise ValueError(f"field '{qname}' is missing or empty")
    if a is None or (isinstance(a, str) and not a.strip()):
        raise ValueError("field 'answer' is missing or empty")
    level, pr = level_and_pass_rate(row)
    keep = {k: v for k, v in row.items() if k in ("num_samples", "id", "source")}
    return Example(prompt=q, answer=str(a).strip(), level=level, pass_rate=pr, meta=keep)


def level_and_pass_rate(row: dict) -> tuple[int | None, float | None]:
    """(level, pass_rate) of a row: `difficulty` (tools/grade.py's graded level) wins over `level` (the source's own);
    MATH's "Level 3" reads as 3, labels off the 1-5 scale ("Level ?", "EASY") as unknown. Raises ValueError naming
    the field when an integer level is outside 1-5 or `pass_rate` outside [0, 1]."""
    level = row.get("difficulty", row.get("level"))
    if level is not None:
        if isinstance(level, str) and level.strip().startswith("Level "):  # MATH: "Level 1".."Level 5", "Level ?"
            level = level.strip()[len("Level "):]
        try:
            level = int(level)
        except (TypeError, ValueError):
            level = None  # "Level ?" and other labels off the 1-5 scale: unknown
        if level is not None and not 1 <= level <= 5:
            raise ValueError(f"field 'difficulty' must be an integer 1-5, got {level}")
    pr = row.get("pass_rate")
    if pr is not None and not (isinstance(pr, (int, float)) and 0.0 <= pr <= 1.0):
        raise ValueError(f"field 'pass_rate' must be a number in [0, 1], got {pr!r}")
    return level, pr


def read_rows(path: str) -> list[tuple[str, dict]]:
    """(location, row) pairs from a .jsonl / .json / .parquet file; location is 'file:line' or 'file:row'."""
    if not os.path.exists(path):
        raise DataError(f"{path}: no such file")
    if os.path.isdir(path):
        raise DataError(f"{path}: a directory, not a data file (.jsonl, .json or .parquet)")
    ext = os.path.splitext(path)[1].lower()
    try:
        if ext == ".jsonl":
            rows = []
            with open(path, encoding="utf-8") as f:
                for i, line in enumerate(f, 1):
                    if not line.strip():
                        continue
                    try:
                        rows.append((f"{path}:{i}", json.loads(line)))
                    except json.JSONDecodeError as e:
                        raise DataError(f"{path}:{i}: invalid JSON ({e.msg})") from None
            return rows
        if ext == ".json":
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
            if isinstance(data, dict) and "data" in data:
                data = data["data"]
            if not isinstance(data, list):
                raise DataError(f"{path}: expected a JSON list of objects (or {{'data': [...]}})")
            return [(f"{path}:row {i}", r) for i, r in enumerate(data, 1)]
        if ext == ".parquet":
            import pyarrow.parquet as pq

            return [(f"{path}:row {i}", r) for i, r in enumerate(pq.read_table(path).to_pylist(), 1)]
    except DataError:
        raise
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DataError(f"{path}: cannot read ({e})") from None
    except Exception as e:  # pyarrow raises its own error types for corrupt files
        raise DataError(f"{path}: cannot read ({type(e).__name__}: {e})") from None
    raise DataError(f"{path}: unsupported file type {ext!r} (use .jsonl, .json or .parquet)")


def load_file(path: str, schema: str | None = None) -> list[Example]:
    rows = read_rows(path)
    if not rows:
        raise DataError(f"{path}: no rows")
    out = []
    for loc, row in rows:
        try:
            out.append(row_to_example(row, schema))
        except ValueError as e:
            raise DataError(f"{loc}: {e}") from None
    return out


def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the Hugging Face hub answers a TCP connection (HF_HUB_OFFLINE=1 says no without asking). One quick
    check instead of transformers' ~50 s of retries on a machine with no network."""
    import socket
    from urllib.parse import urlparse

    if os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes"):
        return False
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    try:
        socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)), timeout=timeout).close()
        return True
    except OSError:
        return False


OFFLINE_HINT = ("where there is network, `pip install datasets` and run `python examples/prepare_data.py SET`, then "
                "pass the .jsonl file it writes; or download the data elsewhere and convert the file here with "
                "`python examples/prepare_data.py SET --source NAME=FILE`")


def load_hub(name: str, split: str, schema: str | None = None) -> list[Example]:
    online = hub_reachable()
    if not online:  # the datasets cache only; the offline switch is read when datasets is imported
        os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        import datasets
    except ImportError:
        if not online:
            raise DataError(f"{name}: not a local file, and the hub cannot be reached from this machine (no network; "
                            f"nor is the `datasets` package installed): {OFFLINE_HINT}") from None
        raise DataError(f"{name}: not a local file, and the `datasets` package is not installed to fetch it from the hub") from None
    cfg = None
    if ":" in name:  # "openai/gsm8k:main"
        name, cfg = name.split(":", 1)
    try:
        ds = datasets.load_dataset(name, cfg, split=split)
    except Exception as e:  # datasets raises many types (ConnectionError, DatasetNotFoundError, ValueError, ...)
        if not online:
            raise DataError(f"{name}: not a local file, not in the datasets cache, and the hub cannot be reached from "
                            f"this machine (no network): {OFFLINE_HINT}") from None
        raise DataError(f"{name}[{split}]: cannot load it as a hub dataset: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    out = []
    for i, row in enumerate(ds, 1):
        try:
            out.append(row_to_example(dict(row), schema))
        except ValueError as e:
            raise DataError(f"{name}[{split}] row {i}: {e}") from None
    return out


def write_jsonl(path: str, rows: list[dict]) -> None:
    """Atomic write: a reader never sees half a file."""
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    os.replace(tmp, path)
