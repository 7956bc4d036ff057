"""resample.py: MiMo's easy pool: the easy share is alpha within a binomial tolerance, pool moves and refresh,
the epoch walk of the main pool, and exact resumption from state_dict.

Run:  python -m pytest tests/test_resample.py -q        (about 1 s on CPU)
"""

import json
import math
import os
import random
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from resample import EasyPool


def test_easy_share_is_alpha_within_4_sigma():
    pool = EasyPool(1000, alpha=0.1, seed=0)
    easy = list(range(0, 1000, 10))
    pool.observe(easy, [1.0] * len(easy))
    n, drawn = 10_000, []
    for _ in range(n // 50):
        drawn += pool.draw(0, 50)
    share = sum(i in set(easy) for i in drawn) / n  # main draws skip easy prompts, so membership = source
    tol = 4 * math.sqrt(0.1 * 0.9 / n)  # 4 binomial sigmas = 0.012
    assert abs(share - 0.1) < tol
    assert pool.metrics()["data/easy_slot_share_total"] == pytest.approx(share)
    assert pool.metrics()["data/easy_pool_size"] == 100


def test_per_slot_bernoulli_replayed_by_hand():
    pool = EasyPool(20, alpha=0.5, seed=7)
    pool.observe([3, 5], [1.0, 1.0])
    out = pool.draw(0, 8)
    rng, main = random.Random(7), [i for i in EasyPool(20, seed=7)._permutation(0) if i not in (3, 5)]
    expected = []
    for _ in range(8):
        expected.append([3, 5][rng.randrange(2)] if rng.random() < 0.5 else main.pop(0))
    assert out == expected


def test_empty_easy_pool_walks_epoch_permutations():
    pool = EasyPool(list(range(100, 110)), alpha=0.3, seed=1)
    first, second = pool.draw(0, 10), pool.draw(1, 10)
    assert sorted(first) == sorted(second) == list(range(100, 110))  # one full epoch each, no easy draws
    assert first != second and pool.epoch == 1 and pool.metrics()["data/easy_slot_share_total"] == 0


def test_moves_refresh_and_main_pool_skips_easy():
    pool = EasyPool(6, alpha=0.0, seed=0)
    pool.observe([1, 2, 3], [1.0, 0.5, 1.0])
    assert pool.easy == [1, 3]
    assert not {1, 3} & set(pool.draw(0, 30))  # alpha = 0: only the main pool, which excludes easy prompts
    pool.observe([3, 1], [0.75, 1.0])  # prompt 3 failed again -> back to the main pool
    assert pool.easy == [1] and 3 in pool.draw(0, 10)
    sticky = EasyPool(6, alpha=0.0, refresh=False)
    sticky.observe([4], [1.0])
    sticky.observe([4], [0.0])
    assert sticky.easy == [4]
    with pytest.raises(ValueError):
        pool.observe([1, 2], [1.0])


def test_all_easy_draws_from_easy_pool():
    pool = EasyPool(3, alpha=0.1, seed=0)
    pool.observe([0, 1, 2], [1.0, 1.0, 1.0])
    assert set(pool.draw(0, 20)) <= {0, 1, 2} and pool.metrics()["data/easy_slot_share"] == 1.0


def test_state_dict_resumes_exactly_through_json():
    def run(pool, steps, start=0):
        out = []
        for k in range(start, steps):
            batch = pool.draw(k, 8)
            pool.observe(batch, [1.0 if (i + k) % 3 == 0 else 0.5 for i in batch])
            out.append(batch)
        return out

    ref = run(EasyPool(50, seed=3), 12)
    a = EasyPool(50, seed=3)
    head = run(a, 5)
    b = EasyPool(50, seed=3)
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    assert head + run(b, 12, start=5) == ref
