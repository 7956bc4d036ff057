"""--stages: one run in stages (Ring-lite's math -> code RL), each with its data, reward and length; parsed and checked."""
from __future__ import annotations

from dataclasses import dataclass

# --reward's values; each one's task kind (its prompt template and built-in data) is kind_of's
REWARDS = ("math", "math-strict", "math-dapo", "code", "code-strict", "code-soft", "countdown", "rg")
STAGE_KEYS = {"data": str, "reward": str, "max_new_tokens": int, "steps": int, "eval": str, "eval_problems": int}


@dataclass
class RunStage:
    """One stage of a run: steps [start, end) train on `data` with `reward` and responses of up to `max_new_tokens`
    (a --curriculum's stage, within one data set, is curriculum.CurriculumStage)."""
    data: str
    reward: str
    max_new_tokens: int
    eval: str
    eval_problems: int
    start: int
    end: int
    task: int = 0  # index of its Task (load_inputs: stages with the same data, reward and evaluation share one)

    @property
    def kind(self) -> str:  # the prompt template: "math", "math-dapo" (DAPO's Answer: line), "code" or "countdown"
        return kind_of(self.reward)


def kind_of(reward: str) -> str:
    """The task kind of a --reward: "code", "countdown", "math-dapo", "rg" (reasoning-gym) or "math"."""
    return ("code" if reward.startswith("code") else reward if reward in ("countdown", "math-dapo", "rg") else "math")


def filter_metric_for(cfg, reward: str) -> str:
    """--filter-metric, with 'auto' resolved for `reward`: the partial scores of code-strict / code-soft, else correctness."""
    if cfg.filter_metric != "auto":
        return cfg.filter_metric
    return "score" if reward in ("code-strict", "code-soft") else "acc"


def wrong_builtin(reward: str, specs: dict) -> str | None:
    """The first of `specs` (name -> data spec) naming a built-in task of another kind than `reward`'s, or None;
    reasoning-gym's tasks (rg:...) and --reward rg go together only."""
    specs = {name: str(spec) for name, spec in specs.items()}
    if reward == "rg" or any(s.startswith("rg:") for s in specs.values()):
        return next((name for name, spec in specs.items() if spec.startswith("rg:") != (reward == "rg")), None)
    mine = {"code": "builtin-code", "countdown": "builtin-countdown"}.get(kind_of(reward), "builtin-math")
    others = {"builtin-math", "builtin-code", "builtin-countdown"} - {mine}
    return next((name for name, spec in specs.items() if str(spec).partition(":")[0] in others), None)


def parse_stages(cfg) -> list[RunStage]:
    """--stages as RunStage objects (one stage from the flags when empty); bad input -> one `error:` line."""
    if not cfg.stages:
        flag = wrong_builtin(cfg.reward, {"train-data": cfg.train_data, "eval-data": cfg.eval_data})
        if flag:
            raise SystemExit(f"error: --{flag}: {getattr(cfg, flag.replace('-', '_'))} does not go with --reward {cfg.reward}")
        return [RunStage(cfg.train_data, cfg.reward, cfg.max_new_tokens, cfg.eval_data, cfg.eval_problems, 0, cfg.max_steps)]
    specs = []
    for k, text in enumerate([t.strip() for t in cfg.stages.split(";") if t.strip()], 1):
        def bad(msg):
            raise SystemExit(f"error: --stages: stage {k} ({text!r}): {msg}")

        f = {}
        for item in text.replace(",", " ").split():
            key, sep, val = item.partition("=")
            if not sep or key not in STAGE_KEYS:
                bad(f"{item!r} is not key=value with a key of {', '.join(STAGE_KEYS)}")
            try:
                f[key] = STAGE_KEYS[key](val)
            except ValueError:
                bad(f"{key}={val!r} is not an integer")
        if "data" not in f:
            bad("no data=")
        f.setdefault("reward", cfg.reward)
        if f["reward"] not in REWARDS:
            bad(f"reward {f['reward']!r} is not one of {', '.join(REWARDS)}")
        key = wrong_builtin(f["reward"], {k: f.get(k) for k in ("data", "eval")})
        if key:
            bad(f"{key}={f[key]} does not go with reward={f['reward']}")
        if f.get("steps", 1) < 1 or f.get("max_new_tokens", 1) < 1 or f.get("eval_problems", 1) < 1:
            bad("steps, max_new_tokens and eval_problems must be >= 1")
        specs.append(f)
    if not specs:
        raise SystemExit("error: --stages: no stage given")
    given = sum(f.get("steps", 0) for f in specs)
    free = [f for f in specs if "steps" not in f]
    if given > cfg.max_steps or (not free and given != cfg.max_steps) or (free and cfg.max_steps - given < len(free)):
        raise SystemExit(f"error: --stages: the stages' steps ({given}, {len(free)} stage(s) without) do not fit --max-steps "
                         f"{cfg.max_steps}")
    out, start = [], 0
    for f in specs:
        n = f.get("steps") or (cfg.max_steps - given) // len(free) + (f is free[-1]) * ((cfg.max_steps - given) % len(free))
        out.append(RunStage(f["data"], f["reward"], f.get("max_new_tokens", cfg.max_new_tokens), f.get("eval", cfg.eval_data),
                         f.get("eval_problems", cfg.eval_problems), start, start + n))
        start += n
    return out
