"""seamless.py: MiMo's seamless rollout (waves, async reward, FIFO early termination) on stub engines and scorers.
Run: python -m pytest tests/test_seamless.py -q   (a few seconds; no model)"""
import os
import random
import sys
import threading
import time

import pytest

import seamless
from rollout import Completion, SamplingParams

# appended, after the project: bench/async_rollout.py must not shadow the project's async_rollout.py
sys.path.append(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))
from seamless_waste import naive_collect  # noqa: E402  (the baseline: DAPO's full-batch rounds)

G = 4
SP = SamplingParams(1.0, 1.0, 16)


class ScriptEngine:
    """Prompt "q<i>": completion j is correct iff outcomes[i][j]; optional generation delay per sequence."""

    def __init__(self, outcomes, per_seq_s=0.0):
        self.outcomes, self.per_seq_s, self.calls = outcomes, per_seq_s, []

    def generate(self, prompts, n, params):
        self.calls.append(len(prompts))
        time.sleep(self.per_seq_s * len(prompts) * n)
        out = []
        for p in prompts:
            i = int(p[1:])
            out.append([Completion([5] * (1 + (i + j) % 7), f"{'1' if self.outcomes(i, j) else '0'}|{i}", 1 + (i + j) % 7, False)
                        for j in range(n)])
        return out


class StubScore:
    """Correct iff the text's first field == gold ("1"); delay(texts) seconds per call; records the calling threads."""

    def __init__(self, delay=lambda n: 0.0, workers=2):
        self.delay, self.workers, self.threads, self.calls = delay, workers, set(), 0

    def __call__(self, texts, golds, truncated=None):
        self.threads.add(threading.current_thread().name)
        self.calls += 1
        time.sleep(self.delay(texts))
        correct = [t.split("|")[0] == g for t, g in zip(texts, golds)]
        return [float(c) for c in correct], correct, {"reward/timeouts": 0}


class Prompts:
    def __init__(self):
        self.pos = 0

    def __call__(self, k):
        out = [(i, {"id": i}, f"q{i}", "1") for i in range(self.pos, self.pos + k)]
        self.pos += k
        return out


def pattern(kinds):
    """kinds[i % len]: 'v' valid (first completion right, others wrong), 'r' all right, 'w' all wrong."""
    return lambda i, j: {"v": j == 0, "r": True, "w": False}[kinds[i % len(kinds)]]


def random_outcomes(seed, p_valid=0.4):
    rng = random.Random(seed)
    kinds = {}

    def f(i, j):
        if i not in kinds:
            kinds[i] = "v" if rng.random() < p_valid else rng.choice("rw")
        return pattern(kinds[i])(0, j)
    return f


def test_exact_target_no_zero_variance_and_launch_order():
    eng, score = ScriptEngine(random_outcomes(0)), StubScore(lambda t: 0.001)
    sr = seamless.SeamlessRollout(eng, score, min_wave=2, max_wave=40, score_chunk=3)
    src = Prompts()
    for step in range(5):
        groups = sr.collect(src, 16, G, SP)
        assert len(groups) == 16
        for g in groups:
            assert len(g.completions) == len(g.rewards) == len(g.correct) == G
            assert 0 < sum(g.correct) < G  # never a zero-variance group
            assert g.prompt == f"q{g.idx}" and g.example == {"id": g.idx} and g.rewards == [float(c) for c in g.correct]
        ids = [g.idx for g in groups]
        assert ids == sorted(ids)  # launch order
        m = sr.last_metrics
        assert m["rollout/generated"] == sum(eng.calls[-m["rollout/gen_rounds"]:]) * G
    sr.close()
    assert score.threads and all(t.startswith("seamless-reward") for t in score.threads)  # scored off the main thread


def test_matches_round_from_groups():
    from trainer import collect

    sr = seamless.SeamlessRollout(ScriptEngine(pattern("vw")), StubScore(), min_wave=4, max_wave=8)
    groups = sr.collect(Prompts(), 3, G, SP)
    batch = collect.Round.from_groups(groups, G)
    assert batch.idx == [0, 2, 4] and len(batch.completions) == len(batch.rewards) == len(batch.correct) == 3 * G
    fields = lambda g: (g.idx, g.example, g.prompt, g.completions, g.rewards, g.correct)  # noqa: E731
    assert [fields(g) for g in batch.groups()] == [fields(g) for g in groups]
    sr.close()


def test_fifo_waits_for_earlier_groups():
    """Group 0 scores slowly, groups 1-5 fast (4 scoring threads, one group per job): with target 2 the answer is
    groups 0 and 1, after waiting for group 0 -- never groups 1 and 2 because they finished first."""
    slow = 0.4
    score = StubScore(lambda texts: slow if texts[0].endswith("|0") else 0.0)
    sr = seamless.SeamlessRollout(ScriptEngine(pattern("v")), score, min_wave=6, max_wave=6, score_chunk=1,
                                  reward_threads=4, estimator=seamless.PassRateEstimator(1.0, 1e6))
    t0 = time.perf_counter()
    groups = sr.collect(Prompts(), 2, G, SP)
    assert [g.idx for g in groups] == [0, 1]
    assert time.perf_counter() - t0 >= slow * 0.9
    m = sr.last_metrics
    assert m["rollout/gen_rounds"] == 1 and m["rollout/overshoot_waste"] == pytest.approx(4 / 6)
    assert m["rollout/groups_discarded_surplus"] == 4  # groups 2-5 were valid and scored, but launched later
    sr.close()


def test_waste_accounting_scripted():
    # valid, invalid alternating; waves of exactly 4; target 3 -> wave 0 (q0-q3: 2 valid), wave 1 (q4-q7): the
    # third valid group is q4, so q5-q7 are overshoot.
    sr = seamless.SeamlessRollout(ScriptEngine(pattern("vr")), StubScore(), min_wave=4, max_wave=4)
    groups = sr.collect(Prompts(), 3, G, SP)
    m = sr.last_metrics
    assert [g.idx for g in groups] == [0, 2, 4]
    assert m["rollout/gen_rounds"] == 2 and m["rollout/generated"] == 8 * G
    assert m["rollout/sample_waste"] == pytest.approx(1 - 3 / 8)
    assert m["rollout/overshoot_waste"] == pytest.approx(3 / 8)
    assert m["rollout/groups_kept_frac"] == pytest.approx(3 / 8)
    # naive DAPO rounds of 3 prompts on the same script: rounds q0-2 (2 valid), q3-5 (q4 valid; q5 overshoot)
    kept, nm = naive_collect(ScriptEngine(pattern("vr")), StubScore(), Prompts(), 3, G, SP)
    assert [g.idx for g in kept] == [0, 2, 4] and nm["rollout/gen_rounds"] == 2
    assert nm["rollout/sample_waste"] == pytest.approx(1 - 3 / 6) and nm["rollout/overshoot_waste"] == pytest.approx(1 / 6)
    sr.close()


def test_wave_sizing_follows_estimate():
    assert seamless.wave_size(10, 0.25, 1, 1000) == 40
    assert seamless.wave_size(10, 0.25, 1, 30) == 30 and seamless.wave_size(0.1, 0.5, 4, 30) == 4
    est = seamless.PassRateEstimator(prior=0.5, weight=8)
    est.update(2, 8)
    assert est.p == pytest.approx((2 + 4) / 16)
    # frozen prior 0.25: the first wave is target / 0.25 prompts
    eng = ScriptEngine(pattern("vwww"))  # true p_valid = 0.25
    sr = seamless.SeamlessRollout(eng, StubScore(), min_wave=1, max_wave=1000,
                                  estimator=seamless.PassRateEstimator(0.25, 1e6))
    sr.collect(Prompts(), 10, G, SP)
    assert eng.calls[0] == 40
    sr.close()
    # learned estimate: the prior says 0.5 but the data says 0.25; the next step's first wave uses what was learned
    eng = ScriptEngine(pattern("vwww"))
    sr = seamless.SeamlessRollout(eng, StubScore(), min_wave=1, max_wave=1000,
                                  estimator=seamless.PassRateEstimator(0.5, 4))
    src = Prompts()
    sr.collect(src, 10, G, SP)
    assert eng.calls[0] == 20  # 10 / 0.5
    p = sr.last_metrics["rollout/pass_rate_est"]
    assert 0.25 <= p < 0.35
    import copy

    nxt = copy.deepcopy(sr.est)
    nxt.new_step()  # counts carried over with decay: the next step starts from (almost) the same estimate
    assert abs(nxt.p - p) < 0.05
    n = len(eng.calls)
    sr.collect(src, 10, G, SP)
    assert eng.calls[n] == seamless.wave_size(10, nxt.p, 1, 1000)
    for launch in [e for e in sr.last_trace if e[0] == "launch"]:
        assert launch[4] > 0  # the estimate used for each wave is recorded
    sr.close()


def test_overlap_generation_with_scoring():
    """Generation 2 ms per sequence, scoring 30 ms per job: waves generate while earlier ones are scored."""
    eng = ScriptEngine(random_outcomes(1), per_seq_s=0.002)
    score = StubScore(lambda t: 0.03)
    sr = seamless.SeamlessRollout(eng, score, min_wave=4, max_wave=12, score_chunk=4,
                                  estimator=seamless.PassRateEstimator(0.4, 1e6))
    sr.collect(Prompts(), 8, G, SP)
    m = sr.last_metrics
    serial = m["rollout/gen_time_s"] + 0.03 * score.calls
    assert m["rollout/gen_rounds"] >= 2 and m["rollout/wall_s"] < 0.95 * serial
    sr.close()


def test_inline_scoring_for_in_process_math_verify():
    score = StubScore(workers=0)  # like MathReward(workers=0): math-verify's SIGALRM needs the main thread
    sr = seamless.SeamlessRollout(ScriptEngine(pattern("vw")), score, min_wave=2, max_wave=4)
    assert not sr.async_reward
    assert len(sr.collect(Prompts(), 3, G, SP)) == 3
    assert score.threads == {threading.main_thread().name}


def test_shape_hook_and_cap():
    sr = seamless.SeamlessRollout(ScriptEngine(pattern("v")), StubScore(), min_wave=2, max_wave=2)
    groups = sr.collect(Prompts(), 2, G, SP, shape=lambda comps, r: [x - 0.5 for x in r])
    assert groups[0].rewards == [0.5, -0.5, -0.5, -0.5]
    sr.close()
    sr = seamless.SeamlessRollout(ScriptEngine(pattern("rw")), StubScore(), min_wave=2, max_wave=4)
    with pytest.raises(RuntimeError, match="mixed correctness"):
        sr.collect(Prompts(), 2, G, SP, max_groups=12)
    sr.close()


class StreamEngine(ScriptEngine):
    """A continuous-batching stub: prompt "q<i>" needs steps(i) engine steps; at most `slots` prompts run at once,
    the rest wait in FIFO order and are admitted as slots free up. `generate` = submit + poll until empty, so both
    modes pay the same per-step cost; `self.steps` counts engine steps (the stand-in for wall time)."""

    def __init__(self, outcomes, steps=lambda i: 1 + i % 5, slots=8):
        super().__init__(outcomes)
        self.steps_of, self.slots, self.steps = steps, slots, 0
        self.queue, self.running, self.aborted, self._next = [], {}, [], 0

    def submit(self, prompts, n, params):
        hs = []
        for p in prompts:
            h = f"r{self._next}"
            self._next += 1
            self.queue.append((h, p, n))
            hs.append(h)
        return hs

    def poll(self):
        while self.queue and len(self.running) < self.slots:
            h, p, n = self.queue.pop(0)
            self.running[h] = [p, n, self.steps_of(int(p[1:]))]
        self.steps += 1
        done = []
        for h in list(self.running):
            self.running[h][2] -= 1
            if self.running[h][2] == 0:
                p, n, _ = self.running.pop(h)
                done.append((h, ScriptEngine.generate(self, [p], n, None)[0]))
        return done

    def abort(self, handles):
        hs = set(handles)
        self.aborted += list(hs)
        self.queue = [q for q in self.queue if q[0] not in hs]
        for h in hs:
            self.running.pop(h, None)

    def pending(self):
        return len(self.queue) + len(self.running)

    def generate(self, prompts, n, params):
        hs = self.submit(prompts, n, params)
        got = {}
        while self.pending():
            got.update(self.poll())
        return [got[h] for h in hs]


def test_streaming_target_order_and_abort():
    eng, score = StreamEngine(random_outcomes(3)), StubScore(lambda t: 0.001)
    sr = seamless.SeamlessRollout(eng, score, min_wave=2, max_wave=6, score_chunk=2)
    assert sr.streaming
    src = Prompts()
    for _ in range(4):
        groups = sr.collect(src, 10, G, SP)
        assert len(groups) == 10 and all(0 < sum(g.correct) < G for g in groups)
        ids = [g.idx for g in groups]
        assert ids == sorted(ids)
        assert eng.pending() == 0  # nothing left running in the engine between steps
        m = sr.last_metrics
        assert m["rollout/aborted_groups"] >= 0 and m["rollout/generated"] == G * (m["rollout/generated"] // G)
    # every scored group's pass rate is reported, all-correct and all-wrong ones included
    obs = dict(sr.last_observed)
    assert set(ids) <= set(obs) and {0.0, 1.0} & set(obs.values())
    sr.close()


def test_streaming_aborts_groups_in_flight():
    """All groups valid, the estimate frozen at 0.5: target 3 launches 6 groups; slots 4, group i needs 1 + i steps.
    Scoring inline (deterministic): after step 3 groups 0-2 are scored and selected; 3 (running), 4 and 5
    (admitted as slots freed) are aborted."""
    eng = StreamEngine(pattern("v"), steps=lambda i: 1 + i, slots=4)
    sr = seamless.SeamlessRollout(eng, StubScore(workers=0), min_wave=1, max_wave=100,
                                  estimator=seamless.PassRateEstimator(0.5, 1e6))
    groups = sr.collect(Prompts(), 3, G, SP)
    assert [g.idx for g in groups] == [0, 1, 2]
    assert sorted(eng.aborted) == ["r3", "r4", "r5"] and eng.pending() == 0 and eng.steps == 3
    m = sr.last_metrics
    assert m["rollout/aborted_groups"] == 3 and m["rollout/overshoot_waste"] == pytest.approx(3 / 6)
    assert m["rollout/unscored_groups"] == 3


def test_streaming_fifo_waits_for_a_long_group():
    """Group 0 takes 30 engine steps, the others 1: the batch still starts with group 0 (launch order), the
    collector keeps stepping the engine (more groups admitted meanwhile) instead of returning groups 1..k."""
    eng = StreamEngine(pattern("v"), steps=lambda i: 30 if i == 0 else 1, slots=4)
    sr = seamless.SeamlessRollout(eng, StubScore(), min_wave=2, max_wave=2,
                                  estimator=seamless.PassRateEstimator(1.0, 1e6))
    groups = sr.collect(Prompts(), 3, G, SP)
    assert [g.idx for g in groups] == [0, 1, 2] and eng.steps >= 30
    sr.close()


def test_streaming_needs_fewer_engine_steps_than_naive_rounds():
    """The point of continuous batching: at p_valid 0.4, full-batch rounds each pay for their longest group, the
    seamless collector keeps the slots busy. Same engine, same outcomes, same per-step cost (engine steps)."""
    steps = lambda i: 2 + (i * 7919) % 13  # noqa: E731  (2..14 steps, a long tail like real response lengths)
    naive_eng = StreamEngine(random_outcomes(5), steps, slots=32)
    src = Prompts()
    for _ in range(6):
        naive_collect(naive_eng, StubScore(), src, 16, G, SP, max_rounds=50)
    stream_eng = StreamEngine(random_outcomes(5), steps, slots=32)
    sr = seamless.SeamlessRollout(stream_eng, StubScore(), min_wave=4, max_wave=64,
                                  estimator=seamless.PassRateEstimator(0.4))
    src = Prompts()
    for _ in range(6):
        sr.collect(src, 16, G, SP)
    sr.close()
    assert stream_eng.steps < 0.8 * naive_eng.steps, (stream_eng.steps, naive_eng.steps)


def test_running_rate_hand_values():
    r = seamless.RunningRate(weight=2.0, decay=0.5, max_age=10)
    for d, v in [(1, False), (1, False), (2, False), (5, True), (7, True), (7, False)]:
        r.add(d, v)
    pred = r.predictor(0.5)
    assert pred(0) == pytest.approx((2 + 1) / (6 + 2))  # every group took > 0 steps: 2 valid of 6
    assert pred(2) == pytest.approx((2 + 1) / (3 + 2))  # took > 2 steps: durations 5, 7, 7
    assert pred(7) == pytest.approx(0.5)  # none took longer: the prior
    r.new_step()
    assert r.predictor(0.5)(2) == pytest.approx((1 + 1) / (1.5 + 2))  # counts halved


def test_age_aware_prediction_cuts_the_surplus():
    """Quick groups all-wrong, slow groups valid (like bare answers vs worked steps): predicting in-flight groups
    with the overall p_valid launches groups for every quick failure and ends with a surplus of valid groups;
    P(valid | still running) knows the slow ones will mostly be valid."""
    kinds = random_outcomes(7, p_valid=0.5)
    steps = lambda i: 12 if kinds(i, 0) != kinds(i, 1) else 1  # noqa: E731  (valid groups are the slow ones)
    res = {}
    for aware in (True, False):
        eng = StreamEngine(kinds, steps, slots=64)
        sr = seamless.SeamlessRollout(eng, StubScore(workers=0), age_aware=aware)
        src, surplus = Prompts(), []
        for s in range(8):
            sr.collect(src, 12, G, SP)
            if s >= 3:  # after the estimates have seen a few steps
                surplus.append(sr.last_metrics["rollout/surplus_waste"])
        res[aware] = sum(surplus) / len(surplus)
    assert res[True] < 0.7 * res[False], res  # measured 0.23 vs 0.44


class PartialScore(StubScore):
    """Never correct; the score is a partial credit that differs inside the groups of even prompts."""

    def __call__(self, texts, golds, truncated=None):
        scores = [0.25 * (int(t.split("|")[1]) % 2 == 0) * (k % 2) for k, t in enumerate(texts)]
        return scores, [False] * len(texts), {"reward/timeouts": 0}


def test_score_metric_keeps_partial_credit_groups():
    # no group has a full pass: the acc filter finds nothing, the score filter keeps the groups whose scores differ
    acc = seamless.SeamlessRollout(ScriptEngine(pattern("w")), PartialScore(workers=0), min_wave=2, max_wave=8)
    with pytest.raises(RuntimeError, match="mixed"):
        acc.collect(Prompts(), 4, G, SP, max_groups=16)
    sr = seamless.SeamlessRollout(ScriptEngine(pattern("w")), PartialScore(workers=0), min_wave=2, max_wave=8)
    groups = sr.collect(Prompts(), 4, G, SP, filter_metric="score")
    assert [g.idx for g in groups] == [0, 2, 4, 6] and all(not any(g.correct) for g in groups)
    assert all(len(set(g.rewards)) > 1 for g in groups)
    with pytest.raises(ValueError):
        sr.collect(Prompts(), 4, G, SP, filter_metric="reward")
