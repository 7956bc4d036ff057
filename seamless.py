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
`SeamlessRollout.collect` returns the kept groups in launch order, each a `Group` (below: the record
trainer/collect.py's dynamic sampling keeps too), so `trainer.collect.Round.from_groups(groups, G)` builds the batch.

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
the main thread (no overlap).
"""
from __future__ import annotations

import math
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Callable

from dapo import DynamicSamplingExhausted, filter_groups


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
class Group:
    """One prompt and its G scored completions: what dynamic sampling keeps or drops whole (DAPO Alg. 1), here and in
    trainer/collect.py. idx .. correct: one prompt's slice of trainer.records.Rollout (example = its examples[i],
    prompt = its prompts[i]); filter_values: what `valid` compares; gold .. duration: the seamless scheduler's."""
    idx: Any  # dataset index of the prompt
    example: Any  # its data.Example
    prompt: str  # the prompt text, template applied
    completions: list = field(default_factory=list)  # (G,) rollout.Completion
    rewards: list | None = None  # (G,) shaped (e.g. DAPO's overlong penalty added)
    correct: list | None = None  # (G,) the verifier's verdicts; None until scored
    filter_values: list | None = None  # (G,) what the filter compares: correct (acc) or the unshaped scores (score)
    gold: Any = None  # the reference answer `score` checks the completions against
    seq: int = 0  # position in the step's launch order
    wave: int = 0  # the wave that launched it
    submitted: int = 0  # streaming: engine steps (polls) at submission
    duration: int | None = None  # streaming: engine steps from submission to its last sample

    @property
    def scored(self) -> bool:
        return self.correct is not None

    @property
    def valid(self) -> bool:
        # DAPO's group filter (dapo.filter_groups, one group): the correctness flags (verl's DAPO recipe
        # filter_groups.metric=acc) or the verifier's scores (metric=score, partial credit), not all equal
        return self.scored and bool(filter_groups(self.filter_values, len(self.filter_values))[0])


@dataclass
class _Step:
    """One `collect` call: its settings and the state its phases share."""
    target: int  # valid groups wanted
    group_size: int  # G
    params: Any  # rollout.SamplingParams
    max_groups: int  # cap on groups launched
    shape: Callable | None  # shape(completions, rewards) -> rewards
    filter_metric: str  # FILTER_METRICS
    t0: float = field(default_factory=time.perf_counter)
    launched: list[Group] = field(default_factory=list)  # in launch order (Group.seq)
    jobs: dict[Future, list[Group]] = field(default_factory=dict)  # scoring jobs in flight
    handles: dict[Any, Group] = field(default_factory=dict)  # streaming: engine handle -> group being generated
    polls: int = 0  # streaming: engine steps so far (the clock group durations are measured in)
    waves: int = 0
    timeouts: int = 0
    t_gen: float = 0.0  # seconds in the engine's calls
    t_wait: float = 0.0  # seconds the main thread waited for rewards (or scored inline)
    trace: list = field(default_factory=list)  # (event, wave, n_groups, t[, p_valid]) for tests and plots

    def since(self) -> float:
        return time.perf_counter() - self.t0


class SeamlessRollout:
    """Collects `target` valid groups per step with waves, asynchronous scoring and FIFO early termination.

        sr = SeamlessRollout(engine, reward_fn, min_wave=4, max_wave=128)              # once per run
        groups = sr.collect(next_prompts, target=32, group_size=8, params=SamplingParams(...))    # each step
        batch = Round.from_groups(groups, 8); sr.last_metrics                            # -> metrics.jsonl

    What is fixed for the run: the engine (streaming if it has submit/poll/abort), the scorer (scored on a thread
    unless it verifies in the calling process: module docstring), the wave bounds, the p_valid `estimator` (counts
    carried across steps; its weight and decay also serve the streaming age model, RunningRate), `age_aware`,
    score_chunk (groups per scoring job: the granularity at which FIFO termination can fire inside a wave) and
    reward_threads (scoring jobs in flight at once; 1 = jobs finish in launch order; more needs a thread-safe
    `score`: MathReward creates its pool lazily, so call it once before, or keep 1 -- it already verifies on
    `workers` processes). What may change per step goes to `collect`.
    """

    def __init__(self, engine, score: Callable, *, min_wave: int | None = None, max_wave: int = 256,
                 estimator: PassRateEstimator | None = None, age_aware: bool = True, score_chunk: int = 8,
                 reward_threads: int = 1):
        self.engine, self.score = engine, score
        self.streaming = all(hasattr(engine, a) for a in ("submit", "poll", "abort"))
        if min_wave is None:  # streaming: launching costs nothing, launch exactly what the estimate asks for
            min_wave = 1 if self.streaming else 4
        if min_wave < 1 or max_wave < min_wave:
            raise ValueError(f"need 1 <= min_wave <= max_wave, got {min_wave}, {max_wave}")
        self.min_wave, self.max_wave, self.age_aware = min_wave, max_wave, age_aware
        self.score_chunk = max(1, score_chunk)
        self.est = estimator if estimator is not None else PassRateEstimator()
        self.ages = RunningRate(self.est.weight, self.est.decay)
        self.async_reward = getattr(score, "workers", 1) != 0  # module docstring: math-verify in a thread fails
        self._pool = (ThreadPoolExecutor(reward_threads, thread_name_prefix="seamless-reward") if self.async_reward
                      else None)
        self.last_metrics: dict = {}
        self.last_observed: list = []  # (idx, pass rate) of every group scored in the last collect
        self.last_trace: list = []  # the last collect's _Step.trace

    def close(self):
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    # -- one step ---------------------------------------------------------------------------------------------------
    def collect(self, next_prompts: Callable[[int], list], target: int, group_size: int, params, *,
                max_groups: int | None = None, shape: Callable | None = None,
                filter_metric: str = "acc") -> list[Group]:
        """The first `target` valid groups in launch order; metrics in `last_metrics`, every scored group's pass rate
        in `last_observed`. max_groups: cap on groups launched (None = 10 x target, DAPO's max_num_gen_batches = 10
        budget); dapo.DynamicSamplingExhausted when it is reached with the batch still short. shape: e.g. DAPO's
        overlong penalty at this step's length limit. filter_metric: what makes a group valid (FILTER_METRICS)."""
        if group_size < 1:
            raise ValueError(f"need group_size >= 1, got {group_size}")
        if filter_metric not in FILTER_METRICS:
            raise ValueError(f"filter_metric must be one of {FILTER_METRICS}, got {filter_metric!r}")
        s = _Step(target, group_size, params, 10 * target if max_groups is None else max_groups, shape, filter_metric)
        self.est.new_step()
        self.ages.new_step()
        self.last_trace = s.trace
        while (selected := self._harvest_and_select(s)) is None:
            k = self._wave(s)
            if k:  # the groups in flight are predicted to be insufficient
                self._launch(s, next_prompts(k))
            elif s.handles:  # streaming: let the engine generate one step
                self._poll(s)
            elif s.jobs:  # generation idles: the groups being scored are predicted sufficient
                self._wait(s)
            else:  # nothing in flight and no room left
                raise DynamicSamplingExhausted(
                    f"seamless rollout: only {sum(g.valid for g in s.launched)}/{target} groups with mixed correctness "
                    f"after {len(s.launched)} groups in {s.waves} waves (cap {s.max_groups}); the data is too easy or "
                    f"too hard for this model")
        aborted = self._drop_in_flight(s)
        # every scored group's pass rate, kept or not (MiMo's easy pool and the curriculum's filter need them)
        self.last_observed = [(g.idx, sum(map(bool, g.correct)) / len(g.correct)) for g in s.launched if g.scored]
        self.last_metrics = self._metrics(s, selected, aborted)
        return selected

    # -- its phases ------------------------------------------------------------------------------------------------
    def _harvest_and_select(self, s: _Step) -> list[Group] | None:
        """Finished scoring jobs in, then FIFO early termination: the first `target` valid groups, if every group
        launched before the last of them is scored (else None)."""
        self._harvest(s, [f for f in list(s.jobs) if f.done()])
        out = []
        for g in s.launched:
            if not g.scored:
                return None
            if g.valid:
                out.append(g)
                if len(out) == s.target:
                    return out
        return None

    def _wave(self, s: _Step) -> int:
        """Prompts to launch now (0: none):  deficit = target - valid_scored - expected valid among those in flight,
        a wave of wave_size(deficit, p_valid) if deficit > 0, within the groups cap and (streaming) the engine's free
        slots, so that only as many groups as can start now are launched (the rest is decided with more scored)."""
        G, p = s.group_size, self.est.p
        in_flight = [g for g in s.launched if not g.scored]
        if self.streaming and self.age_aware:  # groups still generating: P(valid | running this long), RunningRate
            p_run = self.ages.predictor(p)
            expected = sum(p_run(s.polls - g.submitted) if g.duration is None else p for g in in_flight)
        else:
            expected = p * len(in_flight)
        deficit = s.target - sum(g.valid for g in s.launched) - expected
        room = s.max_groups - len(s.launched)
        free = self.engine.free_slots() if self.streaming and hasattr(self.engine, "free_slots") else None
        if deficit <= 1e-9 or room <= 0 or (free is not None and free <= 0):
            return 0
        k = min(room, wave_size(deficit, p, self.min_wave, self.max_wave))
        return k if free is None else min(k, math.ceil(free / G))

    def _launch(self, s: _Step, items: list):
        """A wave: queued in a streaming engine (generated while the loop goes on), or generated now by a
        batch-synchronous one and sent to scoring."""
        new = [Group(idx, ex, prompt, gold=gold, seq=len(s.launched) + i, wave=s.waves)
               for i, (idx, ex, prompt, gold) in enumerate(items)]
        s.trace.append(("launch", s.waves, len(new), s.since(), self.est.p))
        s.launched.extend(new)
        s.waves += 1
        ts = time.perf_counter()
        if self.streaming:
            for g, h in zip(new, self.engine.submit([g.prompt for g in new], s.group_size, s.params)):
                s.handles[h] = g
                g.submitted = s.polls
            s.t_gen += time.perf_counter() - ts
            return
        outs = self.engine.generate([g.prompt for g in new], s.group_size, s.params)
        s.t_gen += time.perf_counter() - ts
        for g, cs in zip(new, outs):
            g.completions = list(cs)
        s.trace.append(("generated", s.waves - 1, len(new), s.since()))
        self._send_to_scoring(s, new)

    def _poll(self, s: _Step):
        """Streaming: one engine step; the groups whose G samples are all done go to scoring at once."""
        ts = time.perf_counter()
        finished = self.engine.poll()
        s.polls += 1
        s.t_gen += time.perf_counter() - ts
        if not finished:
            return
        done = []
        for h, cs in finished:
            g = s.handles.pop(h)
            g.completions, g.duration = list(cs), s.polls - g.submitted
            done.append(g)
        done.sort(key=lambda g: g.seq)
        s.trace.append(("generated", done[0].wave, len(done), s.since()))
        self._send_to_scoring(s, done)

    def _wait(self, s: _Step):
        """Block until a scoring job finishes, and take its scores."""
        ts = time.perf_counter()
        done, _ = wait(list(s.jobs), return_when=FIRST_COMPLETED)
        s.t_wait += time.perf_counter() - ts
        self._harvest(s, done)

    def _drop_in_flight(self, s: _Step) -> int:
        """Groups still in flight are discarded: their scoring dropped if not started, their generation (streaming:
        queued or half-generated) aborted. Returns the number aborted in the engine."""
        for f in list(s.jobs):
            f.cancel()
        if s.handles:
            self.engine.abort(list(s.handles))
        return len(s.handles)

    # -- scoring ----------------------------------------------------------------------------------------------------
    def _send_to_scoring(self, s: _Step, groups: list[Group]):
        """Jobs of `score_chunk` groups, on the reward thread (or scored now, inline: counted as waiting)."""
        ts = time.perf_counter()
        for c in range(0, len(groups), self.score_chunk):
            chunk = groups[c:c + self.score_chunk]
            if self._pool is not None:
                s.jobs[self._pool.submit(self._score, s, chunk)] = chunk
                continue
            f = Future()  # inline scoring: done before generation continues
            try:
                f.set_result(self._score(s, chunk))
            except BaseException as e:  # noqa: BLE001 (re-raised by result())
                f.set_exception(e)
            s.jobs[f] = chunk
        if self._pool is None:
            s.t_wait += time.perf_counter() - ts

    def _score(self, s: _Step, groups: list[Group]):
        """One scoring job (on the reward thread): (rewards, correct, metrics, filter values), G per group."""
        comps = [c for g in groups for c in g.completions]
        rewards, correct, m = self.score([c.text for c in comps], [g.gold for g in groups for _ in range(s.group_size)],
                                         truncated=[c.truncated for c in comps])
        scores = rewards = list(rewards)
        if s.shape is not None:
            rewards = list(s.shape(comps, rewards))
        return rewards, list(correct), m, (list(correct) if s.filter_metric == "acc" else scores)

    def _harvest(self, s: _Step, done):
        """Finished jobs' scores onto their groups; the p_valid estimate and the age model learn from them."""
        G = s.group_size
        for f in done:
            groups = s.jobs.pop(f)
            rewards, correct, m, filt = f.result()
            s.timeouts += int(m.get("reward/timeouts", 0)) if isinstance(m, dict) else 0
            for i, g in enumerate(groups):
                g.rewards, g.correct = rewards[i * G:(i + 1) * G], correct[i * G:(i + 1) * G]
                g.filter_values = filt[i * G:(i + 1) * G]
                if g.duration is not None:
                    self.ages.add(g.duration, g.valid)
            self.est.update(sum(g.valid for g in groups), len(groups))
            s.trace.append(("scored", groups[0].wave, len(groups), s.since()))

    def _metrics(self, s: _Step, selected: list[Group], aborted: int) -> dict:
        """The step's sample accounting (module docstring)."""
        G, launched, wall = s.group_size, s.launched, s.since()
        n_gen, scored = len(launched) * G, [g for g in launched if g.scored]
        last = selected[-1].seq
        surplus = sum(g.valid for g in launched[last + 1:])  # valid, scored, not needed (all earlier ones are used)
        return {
            "rollout/gen_rounds": s.waves,
            "rollout/groups_kept_frac": s.target / max(1, len(launched)),
            "rollout/groups_discarded_surplus": surplus,
            "rollout/generated": n_gen,
            "rollout/sample_waste": 1.0 - s.target * G / n_gen,
            "rollout/overshoot_waste": (len(launched) - last - 1) / len(launched),
            "rollout/unscored_groups": len(launched) - len(scored),
            "rollout/valid_frac": sum(g.valid for g in launched) / max(1, len(scored)),
            "rollout/surplus_waste": surplus / (s.target + surplus),
            "rollout/sample_pass_rate": sum(sum(map(bool, g.correct)) for g in scored) / max(1, G * len(scored)),
            "rollout/aborted_groups": aborted,
            "rollout/pass_rate_est": self.est.p,
            "rollout/reward_wait_frac": s.t_wait / wall if wall > 0 else 0.0,
            "rollout/gen_time_s": s.t_gen,
            "rollout/wall_s": wall,
            "reward/timeouts": s.timeouts,
        }
