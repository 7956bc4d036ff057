"""reasoning-gym's procedural tasks as problems and an exact reward: `--train-data rg:NAME[?KEY=VALUE&...]`.

    rg:chain_sum                                  # the generator's defaults
    rg:chain_sum?min_terms=2&max_terms=2&max_digits=1   # its config fields (reasoning_gym's <Name>Config)
    rg:chain_sum?levels=0,1,2                     # its curriculum's global levels (Example.level = level + 1)
    rg:chain_sum?format=answer-line               # the answer format asked for and read (FORMATS; default boxed)

Problems. `rg_task(spec, n, split, seed)`: the generator seeded with `seed` (held-out: seed + HELD_OUT_SEED) draws
problems and each keeps the split its question hashes to (tasks/split.py, as the built-in tasks): the splits are
disjoint by construction, whatever the seeds and sizes (tested). A generator whose problem space is small repeats
questions; repeats are kept in training (as a sampler would draw them) and dropped from the held-out set. With levels,
every level gets an equal share, each its own seeded generator (reasoning_gym's curriculum: every attribute at that
level).

The reward (RGReward), binary and exact. The answer is read by one declared rule, the one the prompt asks for
(`format=`, FORMATS: `boxed` the last \\boxed{...}, `answer-line` a last line 'Answer: X', `answer-tag` the last
<answer>...</answer>, `final-answer` the last 'The final answer is X.', `worked` the working asked for and the last
number read, a response cut at the length limit holding none; always after the thought: read_answer); it scores 1 iff
reasoning-gym's own scorer gives it exactly 1.0. Its partial credits are 0 here: the default scorer pays
len(answer) / len(response) when the answer appears inside a longer string, and some tasks pay 0.01-0.1 for a wrong
but parseable answer; with group-std normalisation an all-wrong group of such credits would become +-1 advantages for
noise.

Answer-anywhere (a metric beside the reward, never paid: `anywhere`): the response is right if the right answer
stands at its end in any form: the last boxed content, the last number, or the last line without its markup
(`**`, `$`, a leading "The answer is" / "Answer:") and end punctuation. accuracy - anywhere says how much of a gain is
the format.
"""
from __future__ import annotations

import re
from urllib.parse import parse_qsl

from data import DataError, Example, last_boxed
from tasks.split import split_of
from verifier.extract import THINK_OPEN, after_thought, strip_end_marks

PREFIX = "rg:"
# The answer formats a spec may ask for (`format=NAME`, default boxed): the instruction appended to the question, and
# the reader that takes the answer from the response (after the thought, end-of-turn strings stripped)
FORMATS = {
    "boxed": "Give the final answer as \\boxed{ANSWER}.",
    "answer-line": "End your response with a line 'Answer: ANSWER'.",
    "answer-tag": "Give the final answer inside <answer></answer> tags.",
    "final-answer": "End your response with 'The final answer is ANSWER.'",
    "worked": "Work it out step by step, then end your response with 'The final answer is ANSWER.'",
}
HELD_OUT_SEED = 1_000_003  # the held-out generator's seed offset: another stream of problems


def is_rg(spec: str) -> bool:
    return isinstance(spec, str) and spec.startswith(PREFIX)


def parse_spec(spec: str) -> tuple[str, dict, tuple[int, ...] | None, str]:
    """'rg:NAME?k=v&...' -> (NAME, config overrides with ints/floats/bools parsed, levels or None, format); DataError
    on a task reasoning-gym does not have, a config field it does not take, bad levels or an unknown format."""
    import reasoning_gym.factory as factory

    body = spec[len(PREFIX):]
    name, _, query = body.partition("?")
    if name not in factory.DATASETS:
        near = [n for n in factory.DATASETS if name and (name in n or n in name)][:5]
        raise DataError(f"{spec}: reasoning-gym has no task {name!r}" + (f" (did you mean {', '.join(near)}?)" if near else
                        f" ({len(factory.DATASETS)} tasks: python -c \"import reasoning_gym.factory as f; print(sorted(f.DATASETS))\")"))
    fields = factory.DATASETS[name][1].__dataclass_fields__
    kwargs, levels, fmt = {}, None, "boxed"
    for key, value in parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query)) if query else []:
        if key == "format":
            if value not in FORMATS:
                raise DataError(f"{spec}: format must be one of {', '.join(FORMATS)}, got {value!r}")
            fmt = value
        elif key == "levels":
            try:
                levels = tuple(int(x) for x in value.split(","))
            except ValueError:
                raise DataError(f"{spec}: levels are comma-separated integers, got {value!r}") from None
            top = max(len(a.levels) for a in _curriculum(name, spec).attributes.values()) - 1
            if len(set(levels)) != len(levels) or min(levels) < 0 or max(levels) > top:
                raise DataError(f"{spec}: levels must be distinct, 0..{top}, got {value!r}")
        elif key in ("seed", "size") or key not in fields:
            allowed = sorted(k for k in fields if k not in ("seed", "size"))
            raise DataError(f"{spec}: {key!r} is not a setting of {name} (its settings: {', '.join(allowed)}; "
                            "seed and size come from --seed and --train-problems / --eval-problems)")
        else:
            kwargs[key] = _value(value)
    return name, kwargs, levels, fmt


def _value(text: str):
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def _curriculum(name: str, spec: str):
    from reasoning_gym.factory import create_curriculum, has_curriculum

    if not has_curriculum(name):
        raise DataError(f"{spec}: {name} has no curriculum in reasoning-gym (levels need one)")
    return create_curriculum(name)


def _draw(name: str, cfg: dict, n: int, seed: int, split: str, spec: str) -> list[dict]:
    """n entries of one generator setting whose questions hash to `split` (held-out: each question once)."""
    import reasoning_gym

    entries, seen, tries = [], set(), 0
    while len(entries) < n and tries < 50:  # each draw asks for what is missing, with room for the other split's share
        try:
            ds = reasoning_gym.create_dataset(name, size=5 * (n - len(entries)) + 20, seed=seed + 7919 * tries, **cfg)
        except (ValueError, AssertionError, TypeError) as e:
            raise DataError(f"{spec}: reasoning-gym refused the settings: {e}") from None
        for e in ds:
            if split_of(e["question"]) == split and not (split == "test" and e["question"] in seen):
                seen.add(e["question"])
                entries.append(e)
        tries += 1
    if len(entries) < n:
        raise DataError(f"{spec}: only {len(entries)} distinct held-out problems (asked {n}): the task's settings "
                        "allow too few; ask fewer (--eval-problems) or widen the settings")
    return entries[:n]


def rg_task(spec: str, n: int, split: str = "train", seed: int = 0) -> list[Example]:
    """`n` problems of the spec as Examples (prompt: the question and its format's instruction; answer: the task, format and entry,
    which the reward scores with its task's own scorer; level: curriculum level + 1 with levels, interleaved)."""
    if split not in ("train", "test"):
        raise DataError(f"{spec}: split must be 'train' or 'test', got {split!r}")
    name, kwargs, levels, fmt = parse_spec(spec)
    seed += HELD_OUT_SEED if split == "test" else 0
    if levels is None:
        rows = [(e, None) for e in _draw(name, kwargs, n, seed, split, spec)]
    else:
        shares = []
        for i, lv in enumerate(levels):
            cur = _curriculum(name, spec)
            cur.set_global_level(lv)
            cfg = {k: v for k, v in vars(cur.generate_configuration()).items() if k not in ("seed", "size")} | kwargs
            size = n // len(levels) + (i < n % len(levels))
            shares.append([(e, lv) for e in _draw(name, cfg, size, seed + 104729 * lv, split, spec)])
        rows = [share[j] for j in range(max(map(len, shares), default=0)) for share in shares if j < len(share)]
    return [Example(prompt=f"{e['question']}\n{FORMATS[fmt]}", answer={"task": name, "format": fmt, "entry": _plain(e)},
                    level=None if lv is None else lv + 1, meta={"kind": "rg", "task": name}) for e, lv in rows]


def _plain(entry: dict) -> dict:
    """The entry without what a checkpoint's JSON cannot hold (metadata keeps numbers and strings)."""
    import json

    return json.loads(json.dumps(entry, default=str))


def _score(answer: dict, text: str | None) -> bool:
    import reasoning_gym

    if text is None:
        return False
    scorer = reasoning_gym.get_score_answer_fn(answer["task"])
    try:
        return scorer(text, answer["entry"]) == 1.0
    except Exception:  # noqa: BLE001 (a scorer that chokes on a hostile answer: wrong)
        return False


def strip_end(text: str) -> str:
    """The response without surrounding space and the end-of-turn / EOS strings a chat model leaves in it (the math
    reward's own list: verifier/extract.py END_MARKS)."""
    return strip_end_marks(text.strip())


_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
_LEAD = re.compile(r"^(?:the\s+)?(?:final\s+)?answer(?:\s+is)?\s*[:=]?\s*", re.I)


def read_answer(text: str, fmt: str = "boxed") -> str | None:
    """The declared rule: after the thought (a thought that never closes holds no answer), end-of-turn strings
    stripped: boxed: the last \\boxed{...}; answer-line: what follows 'Answer:' on the last line that has it;
    answer-tag: the last <answer>...</answer>; final-answer: what follows the last 'final answer is', to the end of its
    line, without markup and a closing period; worked: the last number (the format asks for the working first, so
    any closing phrase is read; RGReward gives a cut response none)."""
    body = after_thought(strip_end(text))
    if body is None:
        return None
    if fmt == "boxed":
        return last_boxed(body)
    if fmt == "answer-line":
        lines = [ln for ln in body.splitlines() if re.match(r"\s*\**answer\**\s*:", ln, re.I)]
        return re.split(r":", lines[-1], maxsplit=1)[1].replace("**", "").strip() if lines else None
    if fmt == "worked":
        numbers = _NUMBER.findall(body)
        return numbers[-1] if numbers else None
    if fmt == "final-answer":
        said = re.findall(r"final answer is\s*:?\s*([^\n]*)", body, re.I)
        return said[-1].replace("**", "").replace("$", "").strip().rstrip(".").strip() if said else None
    tagged = re.findall(r"<answer>(.*?)</answer>", body, re.S)
    return tagged[-1].strip() if tagged else None


def anywhere_candidates(text: str) -> list[str]:
    """What answer-anywhere tries: the last boxed content, the last number, the last line without markup."""
    text = strip_end(text)
    out = []
    boxed = last_boxed(text)
    if boxed is not None:
        out.append(boxed)
    numbers = _NUMBER.findall(text)
    if numbers:
        out.append(numbers[-1])
    last = text.splitlines()[-1] if text else ""
    last = _LEAD.sub("", last.replace("**", "").replace("$", "").strip()).rstrip(".!?。 ").strip()
    if last:
        out.append(last)
    return out


class RGReward:
    """The trainer's reward interface (as reward.MathReward's): (rewards, correct, metrics) for completions and
    their problems (Example.answer of rg_task). `anywhere(texts, problems)`: the answer-anywhere flags."""

    def __init__(self, correct_reward: float = 1.0, wrong_reward: float = 0.0, thought_open: bool = False):
        self.correct_reward, self.wrong_reward, self.thought_open = correct_reward, wrong_reward, thought_open

    def __call__(self, completions: list[str], problems: list[dict], truncated: list[bool] | None = None):
        """truncated is read for the `worked` format alone: a response cut off has no answer, its last number is a
        step (reward.py's rule 5); in the others a box that closed is an answer, whatever followed it."""
        if len(completions) != len(problems):
            raise ValueError(f"{len(completions)} completions but {len(problems)} problems")
        cut = truncated or [False] * len(completions)
        correct = [not (t and p.get("format") == "worked") and
                   _score(p, read_answer((THINK_OPEN if self.thought_open else "") + c, p.get("format", "boxed")))
                   for c, p, t in zip(completions, problems, cut)]
        return [self.correct_reward if ok else self.wrong_reward for ok in correct], correct, {"reward/timeouts": 0}

    def anywhere(self, completions: list[str], problems: list[dict]) -> list[bool]:
        return [any(_score(p, a) for a in anywhere_candidates(c)) for c, p in zip(completions, problems)]
