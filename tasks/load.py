"""Where a run's problems come from (`--data`, `--eval-data`): a built-in task by name, else a file or a hub dataset
of the math schemas (data.py), or code problems (coding/problems.py)."""
from __future__ import annotations

import os

from coding.problems import load_code_dataset
from data import DataError, Example, load_file, load_hub
from tasks.addition import builtin_task
from tasks.countdown import countdown_task
from tasks.piecewise import builtin_code_task

COUNTDOWN_TRAIN = 2000  # default training problems of builtin-countdown (its exact generator: ~10 ms a problem)
COUNTDOWN_TRAIN_LEVEL1 = 1000  # level 1 alone has 1,250 distinct training problems (and 431 held out): fewer of it
RG_TRAIN = 2000  # default training problems of a reasoning-gym task (rg:NAME...)
COUNTDOWN_LEVELS = (1,)  # builtin-countdown's levels: the shipped cold start's (tools/tiny.py CountdownRecipe), the one
# whose check a laptop SFT learns; 'builtin-countdown:1,2,3' for more (levels 2-3 need a longer SFT: docs/countdown.md;
# tasks.countdown.LEVELS has 4 and 5, with five numbers, for larger models: 'builtin-countdown:4,5')


def countdown_levels(spec: str) -> tuple[int, ...] | None:
    """The levels a 'builtin-countdown' spec names: COUNTDOWN_LEVELS, or those after a colon ('builtin-countdown:1',
    'builtin-countdown:2,3'); None for any other spec. A level that tasks.countdown.LEVELS does not have: DataError."""
    from tasks.countdown import LEVELS

    name, colon, rest = spec.partition(":")
    if name != "builtin-countdown":
        return None
    if not colon:
        return COUNTDOWN_LEVELS
    levels = tuple(int(x) for x in rest.split(",") if x.strip().isdecimal() and x.strip().isascii())
    if not levels or len(levels) != len(rest.split(",")) or not set(levels) <= set(LEVELS) or len(set(levels)) != len(levels):
        raise DataError(f"{spec}: builtin-countdown's levels are comma-separated, each once, of {', '.join(map(str, LEVELS))} "
                        f"(e.g. builtin-countdown:1 or builtin-countdown:1,2)")
    return levels


def load_dataset(spec: str, split: str = "train", n: int | None = None, seed: int = 0, schema: str | None = None) -> list[Example]:
    """'rg:NAME?...' -> reasoning-gym's task (tasks/rg.py); 'builtin-math' / 'builtin-code' / 'builtin-countdown' (or
    'builtin-countdown:LEVELS', countdown_levels) -> a
    built-in task ('builtin': the one of `schema`, math unless 'code' or 'countdown'); a path -> load_file; anything
    else -> a hub dataset name.

    schema='code' reads code problems (load_code_dataset); otherwise the math schemas are detected per row.
    """
    if spec.startswith("rg:"):  # reasoning-gym (tasks/rg.py)
        from tasks.rg import rg_task

        return rg_task(spec, n or (RG_TRAIN if split == "train" else 200), split=split, seed=seed)
    if spec == "builtin-code" or (spec == "builtin" and schema == "code"):
        return builtin_code_task(n or (20000 if split == "train" else 200), split=split, seed=seed)
    levels = countdown_levels(spec)
    if levels is not None or (spec == "builtin" and schema == "countdown"):
        levels = levels or COUNTDOWN_LEVELS
        train = COUNTDOWN_TRAIN_LEVEL1 if levels == (1,) else COUNTDOWN_TRAIN
        return countdown_task(n or (train if split == "train" else 200), split=split, seed=seed, levels=levels)
    if schema == "countdown":
        raise DataError(f"{spec}: --reward countdown reads the built-in task only (builtin-countdown)")
    if schema == "code":
        data = load_code_dataset(spec)
        return data[:n] if n else data
    if spec in ("builtin", "builtin-math"):
        return builtin_task(n or (20000 if split == "train" else 500), split=split, seed=seed)
    if os.path.splitext(spec)[1].lower() in (".jsonl", ".json", ".parquet") or os.path.exists(spec) or spec.endswith("/"):
        data = load_file(spec, schema)
    else:
        data = load_hub(spec, split, schema)
    return data[:n] if n else data
