"""curriculum.py: stage switches at the configured steps, level-weighted sampling, Skywork's per-stage online
filter, rejection sampling without refill, the two papers' default stage lists, and resumption.

Run:  python -m pytest tests/test_curriculum.py -q        (about 1 s on CPU)
"""

import json
import math
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import grpo
from curriculum import (
    Curriculum,
    CurriculumStage,
    compass_stages,
    reject_zero_advantage,
    skywork_stages,
)

LEVELS = [1, 1, 2, 2, 3, 3, 4, 4, 5, 5, None, None]  # dataset indices 0..11; 10 and 11 have no level


def test_stage_switches_at_configured_steps():
    cur = Curriculum([CurriculumStage(3, max_new_tokens=8), CurriculumStage(6, max_new_tokens=16),
                      CurriculumStage(10, max_new_tokens=32)], LEVELS)
    assert [cur.stage_index(k) for k in range(12)] == [0, 0, 0, 1, 1, 1, 2, 2, 2, 2, 2, 2]
    assert cur.stage_at(5).max_new_tokens == 16 and cur.stage_at(1000).max_new_tokens == 32
    _, stage = cur.next_batch(4)
    assert stage.max_new_tokens == 16 and cur.metrics()["data/stage"] == 1
    with pytest.raises(ValueError):
        Curriculum([CurriculumStage(5), CurriculumStage(3)], LEVELS)
    with pytest.raises(ValueError):
        Curriculum([CurriculumStage(5, level_weights=(1, 1))], LEVELS)


def test_level_weights_and_default_level():
    cur = Curriculum([CurriculumStage(10, level_weights=(0, 0, 0, 0, 1))], LEVELS)
    assert set(cur.next_batch(0, 20)[0]) == {8, 9}
    cur = Curriculum([CurriculumStage(10, level_weights=(0, 0, 1, 0, 0))], LEVELS)
    assert set(cur.next_batch(0, 20)[0]) == {4, 5, 10, 11}  # no level counts as level 3
    cur = Curriculum([CurriculumStage(10, level_weights=(3, 0, 0, 0, 1))], LEVELS, seed=0)
    idx, _ = cur.next_batch(0, 4000)
    share = sum(i in (0, 1) for i in idx) / 4000
    assert abs(share - 0.75) < 4 * math.sqrt(0.75 * 0.25 / 4000)
    with pytest.raises(ValueError):
        Curriculum([CurriculumStage(1)], [7])


def test_within_a_level_prompts_walk_epoch_permutations():
    levels = [2] * 10
    cur = Curriculum([CurriculumStage(5, level_weights=(0, 1, 0, 0, 0))], levels)
    a, b = cur.next_batch(0, 10)[0], cur.next_batch(1, 10)[0]
    assert sorted(a) == sorted(b) == list(range(10)) and a != b


def test_online_filter_drops_last_perfect_prompts_at_stage_start():
    levels = [3] * 6
    w = (0, 0, 1, 0, 0)
    stages = [CurriculumStage(2, level_weights=w), CurriculumStage(4, level_weights=w), CurriculumStage(6)]
    cur = Curriculum(stages, levels, online_filter=True)
    cur.next_batch(0, 6)
    cur.observe([0, 1, 2, 3], [1.0, 0.5, 1.0, 1.0])
    cur.observe([3], [0.75])  # 3's LAST accuracy in stage 0 is 0.75: kept
    assert cur.dropped == set()  # nothing happens before the stage boundary
    cur.next_batch(1, 6)
    assert cur.dropped == set()
    idx, _ = cur.next_batch(2, 40)  # first step of stage 1: drop 0 and 2
    assert cur.dropped == {0, 2} and not {0, 2} & set(idx) and set(idx) == {1, 3, 4, 5}
    assert cur.metrics()["data/dropped_at_stage_start"] == 2
    cur.observe([1], [1.0])  # perfect in stage 1: dropped only when stage 2 starts
    assert 1 in cur.next_batch(3, 40)[0]
    assert 1 not in cur.next_batch(4, 40)[0] and cur.dropped == {0, 1, 2}
    off = Curriculum([CurriculumStage(1), CurriculumStage(2)], levels)  # off by default: Skywork-OR1's, not Compass's
    off.observe([0], [1.0])
    assert 0 in off.next_batch(1, 40)[0]


def test_filter_exhausting_the_weighted_levels_raises():
    first = (1, 0, 0, 0, 0)
    cur = Curriculum([CurriculumStage(1, level_weights=first), CurriculumStage(2, level_weights=first)], LEVELS,
                     online_filter=True)
    cur.observe([0, 1], [1.0, 1.0])
    with pytest.raises(RuntimeError, match="no prompts left"):
        cur.next_batch(1)


def test_reject_zero_advantage_hand_values_no_refill():
    rewards = torch.tensor([1.0, 1, 1, 1, 0, 1, 0, 0, 0, 0, 0, 0, -1, 1, 1, 1])
    keep = reject_zero_advantage(rewards, 4)
    assert keep.tolist() == [False, True, False, True]
    adv = grpo.group_advantages(rewards, 4)
    assert reject_zero_advantage(adv, 4).tolist() == keep.tolist()  # same groups from rewards or advantages
    assert (adv.view(4, 4)[~keep] == 0).all() and (adv.view(4, 4)[keep] != 0).any(dim=1).all()
    assert rewards[keep.repeat_interleave(4)].numel() == 8  # the batch shrinks from 16 to 8 responses
    assert reject_zero_advantage([-1.0, -1.0, 1.0, 1.0], 2).tolist() == [False, False]  # +-1 rewards too
    with pytest.raises(ValueError):
        reject_zero_advantage([1.0, 0.0, 1.0], 2)


def test_default_stage_lists():
    sky = skywork_stages(2160, 1000, batch_size=8, group_size=16)
    assert [s.until_step for s in sky] == [740, 1740, 2080, 2160]  # Table 10 at full scale
    assert [s.max_new_tokens for s in sky] == [1000, 2000, 4000, 4000]
    assert [(s.batch_size, s.group_size) for s in sky] == [(8, 16), (8, 16), (8, 16), (4, 64)]
    assert [s.until_step for s in skywork_stages(20, 64)] == [7, 16, 19, 20]
    com = compass_stages(30, 512)
    assert [s.until_step for s in com] == [10, 20, 30] and all(s.max_new_tokens == 512 for s in com)
    mean_level = [sum(w * lv for w, lv in zip(s.level_weights, range(1, 6))) / sum(s.level_weights) for s in com]
    assert mean_level[0] < mean_level[1] < mean_level[2]  # easy -> hard


def test_state_dict_resumes_exactly_through_json():
    def run(cur, start, stop):
        out = []
        for k in range(start, stop):
            idx, _ = cur.next_batch(k)
            cur.observe(idx, [1.0 if i % 4 == 0 else 0.5 for i in idx])
            out.append(idx)
        return out

    stages = compass_stages(12, 64, batch_size=3)
    ref = run(Curriculum(stages, LEVELS, seed=5), 0, 12)
    a = Curriculum(stages, LEVELS, seed=5)
    head = run(a, 0, 5)
    b = Curriculum(stages, LEVELS, seed=5)
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    assert head + run(b, 5, 12) == ref
