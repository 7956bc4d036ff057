"""Train and held-out splits of a generated task: the split of a problem is a hash of its text, so the splits are
disjoint by construction and no held-out problem can ever be drawn for training, whatever the seed.
"""
from __future__ import annotations

import hashlib

HELDOUT_PERCENT = 20  # share of the problem space reserved for evaluation (level 1 of tasks/addition.py: ~180 of 891)


def split_of(question: str) -> str:
    """'test' for about HELDOUT_PERCENT% of all problems, 'train' for the rest: a pure function of the text."""
    h = int(hashlib.sha256(question.encode()).hexdigest()[:8], 16)
    return "test" if h % 100 < HELDOUT_PERCENT else "train"
