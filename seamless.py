"""MiMo's seamless rollout for dynamic sampling (MiMo Sec. 3.4.1): waves, async reward, FIFO early termination.

Naive dynamic sampling (DAPO Alg. 1, `dapo.DynamicSampler`): generate B prompts x G, wait for all, score all,
filter out zero-variance groups, repeat until B groups are kept. The engine idles while rewards are computed, and
the last round overshoots by up to a whole round. Here instead:

  * Waves sized from the running estimate of p_valid, the probability that a group has mixed correctness
    (kept / scored, with a prior; counts of earlier steps kept with an exponential decay). A wave is launched only when the groups
    already in flight are predicted to be insufficient (MiMo's continuous rollout):
        deficit = target - valid_scored - p_valid * groups_in_flight
        wave    = clip(ceil(deficit / p_valid), min_wave, max_wave)      (launched only if deficit > 0)
    With a streaming engine a group still generating after a engine steps counts P(valid | duration > a) instead
    of p_valid (`RunningRate`): quick groups and slow groups are not equally often valid, and the quick ones are
    scored first. On the built-in task this halved the surplus of valid groups (17% -> 8%, bench/seamless_waste.py).
  * Asynchronous reward: completions are scored on a worker thread (`score`, e.g. reward.MathReward, which itself
    verifies on processes) while the main thread keeps generating.
  * Two engine modes. A streaming engine (`submit`/`poll`/`abort`: engines.vllm_engine.VLLMEngine, vLLM's continuous
    batching) is MiMo's continuous rollout proper: a wave is only an admission of prompts into the engine, which
    keeps generating while groups are admitted; each group goes to scoring the moment its G samples are done,
    and groups still generating when the batch is full are aborted. A batch-synchronous engine (HFEngine, one
    `generate` call per wave) can only overlap wave k+1's generation with wave k's scoring.
  * FIFO early termination: groups are taken in launch order; collection stops as soon as the first `target`
    valid groups in launch order are known, which requires every group launched before the last selected one to
    be scored. A later-launched group never displaces an earlier one whose score is still pending, so groups that
    finish early (short responses) are not favoured. Groups in flight at that point are discarded (streaming:
    aborted in the engine; scoring jobs cancelled if not started); a batch-synchronous engine cannot abort a
    wave, so waves are kept small near the end by the estimate.

Interfaces (so it runs with the project's engines and rewards):
    engine.generate(prompts, n, params) -> list (per prompt) of n rollout.Completion       (batch-synchronous)
    engine.submit(prompts, n, params) -> handles; engine.poll() -> [(handle, n Completions)] finished in one
        engine step; engine.abort(handles)                                                  (streaming)
    score(texts, golds, truncated) -> (rewards, correct, metrics)  metrics may hold "reward/timeouts"; truncated:
        each Completion's flag (a response cut by the length limit has no prose answer: reward.py, rule 5)
    next_prompts(k) -> list of k (idx, example, prompt_text, gold) (the trainer's prompt sampler)
    shape(completions, rewards) -> rewards                          optional, e.g. DAPO's overlong penalty
`SeamlessRollout.collect` returns kept groups in launch order, each a tuple
    (idx, example, prompt_text, completions[G], rewards[G], correct[G])
the format of trainer.collect.Round.groups(), so `Round.from_groups(groups, G)` builds the batch.

Sample accounting (metrics):
    rollout/sample_waste     generated responses not in the batch / generated (includes zero-variance groups:
                             never below 1 - p_valid, whatever the scheduler)
    rollout/overshoot_waste  responses of groups launched after the last selected group / generated (the part a
                             scheduler controls, valid or not)
    rollout/reward_wait_frac share of the wall time the main (generating) thread sat waiting for rewards
    rollout/gen_rounds       waves launched;  rollout/pass_rate_est  p_valid estimate after the step
    rollout/valid_frac       share of the scored groups that had mixed correctness (the measured p_valid)
    rollout/surplus_waste    valid groups generated but not needed / valid groups generated: MiMo Table 2's
                             "sample waste ratio" (excess valid samples; 22% for naive dynamic sampling there)
    rollout/sample_pass_rate share of correct responses among the scored ones (MiMo's "pass rate", 41% there)
    rollout/aborted_groups   streaming: groups dropped while queued or half-generated (counted as generated above)

Caveat: math-verify's timeouts use SIGALRM, main thread only. A `score` with `workers == 0` (MathReward verifying in
the calling process) would silently score symbolic matches as wrong from a thread, so such a scorer is run inline in
the main thread (no overlap) unless `async_reward=True` is forced.
"""
from __future__ import annotations

import math
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Callable

from dapo import DynamicSampler, DynamicSamplingExhausted, filter_groups


FILTER_METRICS = ("acc", "score")


class PassRateEstimator:
    """p_valid = (valid + prior * weight) / (scored + weight), floored at `floor`.

    Across steps (`new_step`) the counts are kept, multiplied by `decay`: the estimate follows the slowly drifting
    pass rate with a memory of ~1 / (1 - decay) steps instead of restarting from a handful of groups each step.
    """

    def __init__(self, prior: float = 0.5, weight: float = 8.0, floor: float = 0.05, decay: float = 0.7):
        self.prior, self.weight, self.floor, self.decay = prior, weight, floor, decay
        self.valid, self.scored = 0.0, 0.0

    @property
    def p(self) -> float:
        return max(self.floor, min(1.0, (self.valid + self.prior * self.weight) / (self.scored + self.weight)))

    def update(self, valid: int, scored: int):
        self.valid, self.scored = self.valid + valid, self.scored + scored

    def new_step(self):
        self.valid, self.scored = self.valid * self.decay, self.scored * self.decay


class RunningRate:
    """p_valid of a group still generating after `age` engine steps: P(valid | duration > age), for streaming engines.

    A streaming engine returns short responses first, and groups of short responses are not valid as often as the
    others: on the built-in task the quick ones are mostly bare answers, all right or all wrong, while groups still
    running are mostly valid. Predicting every in-flight group with the overall p_valid then under-counts them,
    launches groups that are not needed, and the surplus grows (measured: 17% of valid groups with the overall p,
    see bench/seamless_waste.py). So each scored group's duration (engine steps from submission to its last sample) is
    recorded with its validity, counts decayed across steps like PassRateEstimator, and an in-flight group of age a
    is predicted by the share of valid groups among those that took longer than a, shrunk towards p with `weight`
    pseudo-counts. Durations are capped at `max_age`.
    """

    def __init__(self, weight: float = 8.0, decay: float = 0.7, max_age: int = 256):
        self.weight, self.decay, self.max_age = weight, decay, max_age
        self.cnt, self.val = [0.0] * (max_age + 2), [0.0] * (max_age + 2)

    def add(self, duration: int, valid: bool):
        d = min(max(0, duration), self.max_age + 1)
        self.cnt[d] += 1.0
        self.val[d] += float(valid)

    def new_step(self):
        self.cnt = [c * self.decay for c in self.cnt]
        self.val = [v * self.decay for v in self.val]

    def predictor(self, p: float) -> Callable[[int], float]:
        """age -> P(valid | duration > age), with p as the prior (suffix sums computed once per call)."""
        n, v = [0.0] * (self.max_age + 3), [0.0] * (self.max_age + 3)
        for d in range(self.max_age + 1, -1, -1):
            n[d], v[d] = n[d + 1] + self.cnt[d], v[d + 1] + self.val[d]
        w, top = self.weight, self.max_age + 1
        return lambda age: (v[min(age + 1, top)] + p * w) / (n[min(age + 1, top)] + w)


def wave_size(deficit: float, p_valid: float, min_wave: int, max_wave: int) -> int:
    """Prompts to launch so that the expected valid groups cover `deficit`, clipped to [min_wave, max_wave]."""
    return int(min(max_wave, max(min_wave, math.ceil(deficit / p_valid - 1e-9))))


@dataclass
class _Group:
    seq: int
    idx: Any
    ex: Any
    prompt: str
    gold: Any
    wave: int
    comps: list = field(default_factory=list)
    rewards: list | None = None
    correct: list | None = None
    filt: list | None = None  # what the filter compares: correct (acc) or the unshaped scores (score)
    t_submit: int = 0  # streaming: engine steps (polls) at submission, and the group's duration in engine steps
    duration: int | None = None

    @property
    def scored(self) -> bool:
        return self.correct is not None

    @property
    def valid(self) -> bool:
        # DAPO's group filter (dapo.filter_groups, one group): the correctness flags (verl's DAPO recipe
        # filter_groups.metric=acc) or the verifier's scores (metric=score, partial credit), not all equal
        return self.scored and bool(filter_groups(self.filt, len(self.filt))[0])

    def as_tuple(self):
        return (self.idx, self.ex, self.prompt, self.comps, self.rewards, self.correct)


class SeamlessRollout:
    """Collects `target` valid groups per step with waves, asynchronous scoring and FIFO early termination.

        sr = SeamlessRollout(engine, reward_fn, group_size=8, min_wave=4, max_wave=128)
        groups = sr.collect(next_prompts, target=32, params=SamplingParams(...))    # each step
        batch = Round.from_groups(groups, 8); sr.last_metrics                       # -> metrics.jsonl

    max_groups: cap on groups launched per step (None = 10 x target, DAPO's max_num_gen_batches = 10 budget);
    raises RuntimeError when it is reached with the batch still short. score_chunk: groups per scoring job (the
    granularity at which FIFO termination can fire inside a wave). reward_threads: scoring jobs in flight at once
    (1 = jobs finish in launch order; more needs a thread-safe `score`: MathReward creates its pool lazily, so call
    it once before, or keep 1 -- it already verifies on `workers` processes).
    """

    def __init__(self, engine, score: Callable, group_size: int, *, min_wave: int | None = None, max_wave: int = 256,
                 prior: float = 0.5, prior_weight: float = 8.0, decay: float = 0.7, max_groups: int | None = None,
                 shape: Callable | None = None, score_chunk: int = 8, async_reward: bool | None = None,
                 reward_threads: int = 1, streaming: bool | None = None, age_aware: bool = True, clock: Callable[[], float] = time.perf_counter,
                 filter_metric: str = "acc"):
        if streaming is None:
            streaming = all(hasattr(engine, a) for a in ("submit", "poll", "abort"))
        if min_wave is None:  # streaming: launching costs nothing, launch exactly what the estimate asks for
            min_wave = 1 if streaming else 4
        if group_size < 1 or min_wave < 1 or max_wave < min_wave:
            raise ValueError(f"need group_size >= 1 and 1 <= min_wave <= max_wave, got {group_size}, {min_wave}, {max_wave}")
        if filter_metric not in FILTER_METRICS:
            raise ValueError(f"filter_metric must be one of {FILTER_METRICS}, got {filter_metric!r}")
        self.engine, self.score, self.G, self.filter_metric = engine, score, group_size, filter_metric
        self.min_wave, self.max_wave, self.max_groups, self.shape = min_wave, max_wave, max_groups, shape
        self.score_chunk = max(1, score_chunk)
        self.est = PassRateEstimator(prior, prior_weight, decay=decay)
        if async_reward is None:  # see the module docstring: math-verify in a thread cannot time out, it fails
            async_reward = getattr(score, "workers", 1) != 0
        self.async_reward = async_reward
        self.streaming = streaming
        self.age_aware = age_aware
        self.ages = RunningRate(prior_weight, decay)
        self.clock = clock
        self._pool = ThreadPoolExecutor(reward_threads, thread_name_prefix="seamless-reward") if async_reward else None
        self.last_metrics: dict = {}
        self.last_observed: list = []  # (idx, pass rate) of every group scored in the last collect
        self.last_trace: list = []  # (event, wave, n_groups, t) for tests and plots

    def close(self):
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    # -- scoring job (runs on the reward thread) --------------------------------------------------------------------
    def _score_groups(self, groups: list[_Group]):
        comps = [c for g in groups for c in g.comps]
        rewards, correct, m = self.score([c.text for c in comps], [g.gold for g in groups for _ in range(self.G)],
                                         truncated=[c.truncated for c in comps])
        scores = rewards = list(rewards)
        if self.shape is not None:
            rewards = list(self.shape(comps, rewards))
        return rewards, list(correct), m, (list(correct) if self.filter_metric == "acc" else scores)

    def _submit_chunks(self, groups: list[_Group], jobs: dict) -> float:
        """Queue `groups` for scoring in chunks of `score_chunk`; returns the seconds spent scoring inline."""
        ts = self.clock()
        for c in range(0, len(groups), self.score_chunk):
            chunk = groups[c:c + self.score_chunk]
            jobs[self._submit(chunk)] = chunk
        return self.clock() - ts if self._pool is None else 0.0

    def _submit(self, groups: list[_Group]) -> Future:
        if self._pool is not None:
            return self._pool.submit(self._score_groups, groups)
        f = Future()  # inline scoring: done before generation continues
        try:
            f.set_result(self._score_groups(groups))
        except BaseException as e:  # noqa: BLE001 (re-raised by result())
            f.set_exception(e)
        return f

    # -- one step -------------------------------------------------------------------------------------------------------
    def collect(self, next_prompts: Callable[[int], list], target: int, params) -> list[tuple]:
        """The first `target` valid groups in launch order (Round.groups() tuples); metrics in `last_metrics`."""
        G, clock = self.G, self.clock
        max_groups = self.max_groups if self.max_groups is not None else 10 * target
        self.est.new_step()
        self.ages.new_step()
        launched: list[_Group] = []
        jobs: dict[Future, list[_Group]] = {}
        t0 = clock()
        t_gen = t_wait = t_score_inline = 0.0
        waves, timeouts, trace = 0, 0, []
        self.last_trace = trace
        streaming = self.streaming
        handles: dict[str, _Group] = {}  # streaming: engine handle -> group being generated
        polls = 0  # streaming: engine steps so far (the clock group durations are measured in)

        def harvest(done):
            nonlocal timeouts
            for f in done:
                groups = jobs.pop(f)
                rewards, correct, m, filt = f.result()
                timeouts += int(m.get("reward/timeouts", 0)) if isinstance(m, dict) else 0
                for i, g in enumerate(groups):
                    g.rewards, g.correct = rewards[i * G:(i + 1) * G], correct[i * G:(i + 1) * G]
                    g.filt = filt[i * G:(i + 1) * G]
                    if g.duration is not None:
                        self.ages.add(g.duration, g.valid)
                self.est.update(sum(g.valid for g in groups), len(groups))
                trace.append(("scored", groups[0].wave, len(groups), clock() - t0))

        def fifo_select():
            """The first `target` valid groups if every group launched before the last of them is scored."""
            out = []
            for g in launched:
                if not g.scored:
                    return None
                if g.valid:
                    out.append(g)
                    if len(out) == target:
                        return out
            return None

        selected = None
        while True:
            harvest([f for f in list(jobs) if f.done()])
            selected = fifo_select()
            if selected is not None:
                break
            valid = sum(g.valid for g in launched)
            p = self.est.p
            if streaming and self.age_aware:  # groups still generating: P(valid | running this long), see RunningRate
                p_run = self.ages.predictor(p)
                expected = sum(p_run(polls - g.t_submit) if g.duration is None else p for g in launched if not g.scored)
            else:
                expected = p * sum(not g.scored for g in launched)
            deficit = target - valid - expected
            room = max_groups - len(launched)
            free = self.engine.free_slots() if streaming and hasattr(self.engine, "free_slots") else None
            if deficit > 1e-9 and room > 0 and (free is None or free > 0):
                # the groups in flight are predicted to be insufficient: launch a wave (streaming: only as many
                # groups as can start now; the rest is decided later, with more groups scored)
                k = min(room, wave_size(deficit, p, self.min_wave, self.max_wave))
                if free is not None:
                    k = min(k, math.ceil(free / G))
                items = next_prompts(k)
                new = [_Group(len(launched) + i, it[0], it[1], it[2], it[3], waves) for i, it in enumerate(items)]
                trace.append(("launch", waves, len(new), clock() - t0, p))
                launched.extend(new)
                waves += 1
                ts = clock()
                if streaming:  # queued in the engine; generated while the loop goes on
                    for g, h in zip(new, self.engine.submit([g.prompt for g in new], G, params)):
                        handles[h] = g
                        g.t_submit = polls
                    t_gen += clock() - ts
                    continue
                outs = self.engine.generate([g.prompt for g in new], G, params)
                t_gen += clock() - ts
                for g, cs in zip(new, outs):
                    g.comps = list(cs)
                trace.append(("generated", waves - 1, len(new), clock() - t0))
                t_score_inline += self._submit_chunks(new, jobs)
                continue
            if handles:  # streaming: one engine step; groups whose G samples are all done go to scoring at once
                ts = clock()
                finished = self.engine.poll()
                polls += 1
                t_gen += clock() - ts
                if finished:
                    done_groups = []
                    for h, cs in finished:
                        g = handles.pop(h)
                        g.comps, g.duration = list(cs), polls - g.t_submit
                        done_groups.append(g)
                    done_groups.sort(key=lambda g: g.seq)
                    trace.append(("generated", done_groups[0].wave, len(done_groups), clock() - t0))
                    t_score_inline += self._submit_chunks(done_groups, jobs)
                continue
            if not jobs:  # nothing in flight and no room left
                valid = sum(g.valid for g in launched)
                raise DynamicSamplingExhausted(
                    f"seamless rollout: only {valid}/{target} groups with mixed correctness after {len(launched)} groups "
                    f"in {waves} waves (cap {max_groups}); the data is too easy or too hard for this model")
            ts = clock()
            done, _ = wait(list(jobs), return_when=FIRST_COMPLETED)  # generation idles: predicted sufficient
            t_wait += clock() - ts
            harvest(done)
        for f in list(jobs):  # groups still in flight are discarded: drop their scoring if it has not started
            f.cancel()
        aborted = len(handles)
        if handles:  # streaming: groups still generating (or queued) are dropped mid-way
            self.engine.abort(list(handles))
        wall = clock() - t0
        # every scored group's pass rate, kept or not (MiMo's easy pool and the curriculum's filter need them)
        self.last_observed = [(g.idx, sum(map(bool, g.correct)) / len(g.correct)) for g in launched if g.scored]
        n_gen = len(launched) * G
        last = selected[-1].seq
        surplus = sum(g.valid for g in launched[last + 1:])  # valid, scored, not needed (all earlier ones are used)
        self.last_metrics = {
            "rollout/gen_rounds": waves,
            "rollout/groups_kept_frac": target / max(1, len(launched)),
            "rollout/groups_discarded_surplus": surplus,
            "rollout/generated": n_gen,
            "rollout/sample_waste": 1.0 - target * G / n_gen,
            "rollout/overshoot_waste": (len(launched) - last - 1) / len(launched),
            "rollout/unscored_groups": sum(not g.scored for g in launched),
            "rollout/valid_frac": sum(g.valid for g in launched) / max(1, sum(g.scored for g in launched)),
            "rollout/surplus_waste": surplus / (target + surplus),
            "rollout/sample_pass_rate": (sum(sum(map(bool, g.correct)) for g in launched if g.scored)
                                         / max(1, G * sum(g.scored for g in launched))),
            "rollout/aborted_groups": aborted,
            "rollout/pass_rate_est": self.est.p,
            "rollout/reward_wait_frac": (t_wait + t_score_inline) / wall if wall > 0 else 0.0,
            "rollout/gen_time_s": t_gen,
            "rollout/wall_s": wall,
            "reward/timeouts": timeouts,
        }
        return [g.as_tuple() for g in selected]


def naive_collect(engine, score, next_prompts, target: int, group_size: int, params, *, round_size: int | None = None,
                  max_rounds: int = 10, shape: Callable | None = None, clock: Callable[[], float] = time.perf_counter):
    """The baseline the benchmarks and the course compare against: DAPO's full-batch rounds (generate round_size
    prompts, score all, filter, repeat) with DAPO's own bookkeeping, dapo.DynamicSampler, which the trainer's
    `--dynamic-sampling` drives in trainer/collect.py; here it drives an engine and a scorer directly, with the
    metrics SeamlessRollout reports. Returns (groups, metrics); raises dapo.DynamicSamplingExhausted after
    max_rounds rounds still short."""
    G, round_size = group_size, round_size or target
    sampler = DynamicSampler(target, G, max_rounds)
    launched, t_gen, t_score, timeouts, n_correct = 0, 0.0, 0.0, 0, 0
    t0 = clock()
    while not sampler.full:
        items = next_prompts(round_size)
        ts = clock()
        outs = engine.generate([it[2] for it in items], G, params)
        t_gen += clock() - ts
        ts = clock()
        comps = [c for cs in outs for c in cs]
        rewards, correct, m = score([c.text for c in comps], [it[3] for it in items for _ in range(G)],
                                    truncated=[c.truncated for c in comps])
        rewards = list(shape(comps, list(rewards)) if shape else rewards)
        t_score += clock() - ts
        timeouts += int(m.get("reward/timeouts", 0)) if isinstance(m, dict) else 0
        n_correct += sum(map(bool, correct))
        groups = [(launched + i, (it[0], it[1], it[2], list(outs[i]), rewards[i * G:(i + 1) * G],
                                  list(correct[i * G:(i + 1) * G]))) for i, it in enumerate(items)]
        launched += len(items)
        sampler.add(groups, [bool(c) for c in correct])  # DAPO's filter: mixed correctness
    n_valid, rounds = len(sampler.kept), sampler.rounds
    kept = sampler.take()  # the first target valid groups, in launch order
    last = kept[-1][0]
    wall = clock() - t0
    n_gen = launched * G
    return [g for _, g in kept], {
        "rollout/gen_rounds": rounds, "rollout/groups_kept_frac": target / launched, "rollout/generated": n_gen,
        "rollout/sample_waste": 1.0 - target * G / n_gen, "rollout/overshoot_waste": (launched - last - 1) / launched,
        "rollout/valid_frac": n_valid / launched, "rollout/surplus_waste": (n_valid - target) / n_valid,
        "rollout/sample_pass_rate": n_correct / n_gen,
        "rollout/reward_wait_frac": t_score / wall if wall > 0 else 0.0, "rollout/gen_time_s": t_gen,
        "rollout/wall_s": wall, "reward/timeouts": timeouts,
    }
