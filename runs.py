"""Run directories, checkpoints, resume and interruption: what makes a run one run, whatever happens to its process.

    runs/default/                  one run per directory (--output-dir)
        config.json                the run's settings (the model's resolved path included)
        metrics.jsonl evals.jsonl samples.jsonl summary.json curves.png
        checkpoint-20/ ...         model (or LoRA adapter) + tokenizer, trainer_state.pt (optimizer, every process's
                                   RNG streams, data position, history), run_config.json; the newest --keep-checkpoints

Rules, and the choice behind each:
  * A run directory holds one run. A new run into a directory that holds another stops with one error line naming
    the directory and the ways out: --resume auto (continue it), --overwrite (replace it), another --output-dir.
    Refusing is what transformers' example scripts did (`overwrite_output_dir`) and what keeps the README's paths
    (runs/default/checkpoint-40) meaningful; CleanRL's fresh per-run names never mix either, but a name the user did
    not choose is a name the next command does not know.
  * The checkpoint's saved settings are the run's settings. On --resume they are the defaults, and each flag given on
    the command line follows its own rule, declared with the flag (config.flag(..., resume=...); RESUME_RULES): one
    that changes the run (recipe, data, reward, lengths, batch and group sizes, loss, optimiser) is refused, unless
    --resume-override, which applies it with one warning line per flag; one that does not change what the run
    computes (--max-steps, checkpoint and evaluation cadence, memory knobs, trackers, threads) changes freely; what
    defines the run or its evaluation (model, data, seed, the held-out problems and their decoding) never changes:
    before and after are always measured on the same problems.
  * Saved settings are read as this version of train.py writes them: a run directory or checkpoint of an earlier
    version (a setting missing from its config.json, no run_config.json) is one error line, not a guess.
  * --resume auto says what it does: "resuming from step N of DIR"; on a run stopped before its first checkpoint,
    that run starts again from step 0 with its own settings (its config.json, checked against the flags given as a
    checkpoint's are), never with the defaults or another recipe; "no checkpoint in DIR: starting fresh" where the
    directory holds no run; on a finished run, that it is finished (exit 0, nothing changed).
  * Checkpoints are written to checkpoint-N.tmp and renamed (a crash never leaves half of one); the newest
    --keep-checkpoints are kept. Ctrl-C (SIGINT) ends the run with one line (the step reached, the last checkpoint,
    the command that resumes it) and exit status 130; steps after the last checkpoint are lost, never half-saved.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import signal
import sys
import threading

import torch
from tqdm import tqdm

RUN_FILES = ("config.json", "metrics.jsonl", "evals.jsonl", "samples.jsonl", "summary.json", "curves.png", "tensorboard")
# What --resume does with a flag given a value other than the run's; each flag names its rule where it is declared
# (config.flag(..., resume=...))
RESUME_RULES = {
    "free": "changes freely: it does not change what the run computes (no warning)",
    "checked": "refused, unless --resume-override: then applied, with one warning line",
    "fixed": "never changes, even with --resume-override: it defines the run or its evaluation",
}


def main_process() -> bool:
    """Rank 0, before Accelerate exists (the launcher sets RANK)."""
    return os.environ.get("RANK", "0") == "0"


def say(msg: str) -> None:
    if main_process():
        print(msg, file=sys.stderr, flush=True)


def machine() -> dict:
    """What a seeded run's numbers depend on besides the code and the flags: the CPU and the instruction set torch's
    kernels use (ATEN_CPU_CAPABILITY chooses another: CPU kernels that differ in the last bits of a float change
    sampled tokens, and the run from there), the torch build, its threads, the GPU. Recorded in every run directory
    (config.json "machine") and results file, so that a figure can be checked on another machine knowingly."""
    import platform

    cpu, flags = platform.processor(), []
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and ":" in line:
                    cpu = line.split(":", 1)[1].strip()
                elif line.startswith("flags") and ":" in line:
                    flags = line.split(":", 1)[1].split()
                    break
    except OSError:  # not Linux
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "isa": [f for f in ("avx2", "avx512f", "avx512_bf16", "avx512_vnni",
                                                                      "amx_bf16", "neon", "sve") if f in flags],
            "kernels": torch.backends.cpu.get_cpu_capability(), "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None}


def bf16_support(isa) -> str:
    """The CPU's bf16 instructions from machine()'s "isa": 'amx' (AMX tiles), 'avx512_bf16' or 'none'. bf16 matmuls
    round differently on each, and pay only with AMX (without it fp32 is faster: docs/smollm2.md)."""
    return "amx" if "amx_bf16" in isa else "avx512_bf16" if "avx512_bf16" in isa else "none"


def bf16_warning(what: str) -> str:
    """'' unless this process runs on a CPU with no bf16 instructions (no GPU, neither AVX-512 bf16 nor AMX, e.g.
    AVX2): there torch's bf16 matmuls have no hardware path, and `what` (bf16 flags) costs many times float32."""
    m = machine()
    if m["gpu"] or bf16_support(m["isa"]) != "none":
        return ""
    return (f"warning: {what} on a CPU with no bf16 instructions ({m['kernels']} kernels): bf16 matmuls run without "
            "hardware support there, a SmolLM2 step took 20x its float32 time on one (docs/smollm2.md)")


LOG_EVERY = 30.0  # seconds between two lines of a progress bar in a log file


class _LogLines:
    """A progress bar's output when stderr is a file or a pipe: each refresh one plain line (tqdm redraws its line
    with carriage returns, which a log file keeps as one unreadable line), none for the bar's clearing, none that
    repeats the line before it."""

    def __init__(self, stream):
        self.stream, self.last = stream, None

    def write(self, s: str) -> None:
        s = s.replace("\r", "").replace("\x1b[A", "").strip()
        if s and s != self.last:
            self.stream.write(s + "\n")
            self.last = s

    def flush(self) -> None:
        self.stream.flush()


class _LogBar(tqdm):
    """tqdm for a log file: a line only when the count moves and LOG_EVERY s have passed since the last line
    (miniters=1, mininterval), never for a postfix (tqdm's set_postfix draws the line at once) nor for the last count
    (the end's line shows it), and the count in it is the current one (tqdm's own iteration updates the count it shows
    only when it draws)."""

    def set_postfix(self, ordered_dict=None, refresh=True, **kwargs):
        super().set_postfix(ordered_dict, refresh=False, **kwargs)  # shown with the next line

    def update(self, n=1):
        if self.total is not None and self.n + n >= self.total:  # the last: close() writes the final line
            self.n += n
            return None
        return super().update(n)

    def close(self):
        if not self.disable and not self.leave and self.n != self.last_print_n:  # leave=False: its end's line too
            self.refresh()
        super().close()

    def __iter__(self):
        if self.disable:
            yield from self.iterable
            return
        try:
            for item in self.iterable:
                yield item
                self.update()
        finally:
            self.close()


def progress_bar(iterable=None, **kw):
    """tqdm on a terminal; elsewhere (a log file, a pipe) _LogBar: a line at the start, at most one every LOG_EVERY
    seconds, and one at the end, as _LogLines writes them."""
    if sys.stderr.isatty():
        return tqdm(iterable, **kw)
    kw.update(file=_LogLines(sys.stderr), mininterval=max(kw.get("mininterval", 0.1), LOG_EVERY), miniters=1,
              dynamic_ncols=False, ncols=120)
    return _LogBar(iterable, **kw)


def save_checkpoint(path, accelerator, model, tok, optimizer, state: dict):
    """Written to a temporary directory and renamed: a crash never leaves half a checkpoint.

    Under FSDP every process takes part in gathering the full weights and the full optimizer state (torch's
    get_optimizer_state_dict, parameter names as keys), which the main process writes: the checkpoint has the same
    files as an unsharded run's and resumes under any process count with the same sharding mode."""
    from accelerate.utils import DistributedType

    weights = opt_state = None
    rng = rng_states(accelerator)  # a collective: every process's sampling streams
    if accelerator.distributed_type == DistributedType.FSDP:  # trainer.distributed.is_sharded (runs.py is below it)
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

        weights = accelerator.get_state_dict(model)
        opt_state = get_optimizer_state_dict(model, optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if not accelerator.is_main_process:
        return
    tmp = path + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    unwrapped = accelerator.unwrap_model(model)
    if weights is not None:  # a tied LM head is stored once, as in an unsharded checkpoint
        out, inp = unwrapped.get_output_embeddings(), unwrapped.get_input_embeddings()
        if out is not None and out.weight is inp.weight:
            weights.pop(next(n for n, m in unwrapped.named_modules() if m is out) + ".weight", None)
    unwrapped.save_pretrained(tmp, state_dict=weights)
    tok.save_pretrained(tmp)
    if "config" in state:  # the run's settings, readable without loading the optimizer state
        write_run_config(os.path.join(tmp, "run_config.json"), state["config"])
    torch.save(
        {"optimizer": opt_state if weights is not None else optimizer.state_dict(), "rng": rng, **state},
        os.path.join(tmp, "trainer_state.pt"),
    )
    shutil.rmtree(path, ignore_errors=True)
    os.replace(tmp, path)


def rng_states(accelerator) -> list[dict]:
    """The RNG states of every process (index = process rank): each samples from its own stream (seed + rank), so a
    resumed run restores each process's own, as Accelerate's save_state does (random_states_<rank>.pkl)."""
    mine = {"torch": torch.get_rng_state(), "py": random.getstate()}
    if torch.cuda.is_available():
        mine["cuda"] = torch.cuda.get_rng_state()
    if accelerator.num_processes == 1:
        return [mine]
    every = [None] * accelerator.num_processes
    torch.distributed.all_gather_object(every, mine)
    return every


def set_rng_states(accelerator, states: list[dict]) -> None:
    """Back to this process's saved streams; a checkpoint from another process count gives rank r the streams of
    process r mod its count (the run continues, not bit for bit)."""
    mine = states[accelerator.process_index % len(states)]
    torch.set_rng_state(mine["torch"])
    random.setstate(mine["py"])
    if "cuda" in mine and torch.cuda.is_available():
        torch.cuda.set_rng_state(mine["cuda"])


def check_shared_run_dir(accelerator, output_dir: str, resume_from: str | None) -> None:
    """Several processes (several machines): the run directory must be one directory that every process sees.

    Only the global main process writes it (config, metrics, checkpoints), and on --resume every process reads the
    checkpoint (weights, optimizer, its own RNG streams, the samplers): a run directory on each node's local disk
    would leave the other nodes resuming from nothing, or from another run. So before anything is written the main
    process puts a probe file in the directory (or in its nearest existing parent) and every process looks for it,
    and all processes compare the checkpoint --resume found; one `error:` line on every process when they disagree.
    A collective (two all_gather_object calls); nothing is left behind."""
    if accelerator.num_processes == 1:
        return
    import uuid

    probe = None
    if accelerator.is_main_process:
        where = os.path.abspath(output_dir)
        while not os.path.isdir(where):
            where = os.path.dirname(where)
        probe = os.path.join(where, f".grpo-recipes-probe-{uuid.uuid4().hex}")
        open(probe, "w").close()
    try:
        shared = [None] * accelerator.num_processes
        torch.distributed.all_gather_object(shared, probe)
        mine = (os.path.exists(shared[0]), os.path.abspath(resume_from) if resume_from else None,
                os.environ.get("GROUP_RANK", "0"))
        every = [None] * accelerator.num_processes
        torch.distributed.all_gather_object(every, mine)
    finally:
        if probe:
            os.remove(probe)
    blind = [f"process {r} (node {node})" for r, (seen, _, node) in enumerate(every) if not seen]
    if blind:
        raise SystemExit(f"error: --output-dir {output_dir}: {', '.join(blind)} cannot see what the main process writes "
                         "there; with several machines the run directory must be on a filesystem every node mounts at "
                         "the same path (docs/multi_gpu.md)")
    found = {ck for _, ck, _ in every}
    if len(found) > 1:
        what = ", ".join(f"process {r} (node {node}): {ck or 'none'}" for r, (_, ck, node) in enumerate(every))
        raise SystemExit(f"error: --resume: the processes found different checkpoints ({what}); every node must see "
                         "the same run directory (docs/multi_gpu.md)")


def checkpoints(output_dir: str) -> list[str]:
    """checkpoint-N directories of a run, oldest first (a .tmp left by a crash is not one)."""
    if not os.path.isdir(output_dir):
        return []
    cks = [d for d in os.listdir(output_dir) if d.startswith("checkpoint-") and d[11:].isdigit()]
    return [os.path.join(output_dir, d) for d in sorted(cks, key=lambda d: int(d[11:]))]


def latest_checkpoint(output_dir: str) -> str | None:
    cks = checkpoints(output_dir)
    return cks[-1] if cks else None


def prune_checkpoints(output_dir: str, keep: int) -> None:
    """Keep the newest `keep` checkpoints (0 = all) and no leftover .tmp."""
    for d in (checkpoints(output_dir)[:-keep] if keep else []):
        shutil.rmtree(d, ignore_errors=True)
    for d in os.listdir(output_dir):
        if d.startswith("checkpoint-") and d.endswith(".tmp"):
            shutil.rmtree(os.path.join(output_dir, d), ignore_errors=True)


def run_files(output_dir: str) -> list[str]:
    """What in `output_dir` belongs to a run (empty: the directory holds none)."""
    if not os.path.isdir(output_dir):
        return []
    return [f for f in os.listdir(output_dir) if f in RUN_FILES or f.startswith("checkpoint-")]


def check_output_dir(output_dir: str, resume_from: str | None, overwrite: bool) -> None:
    """Refuse to mix two runs in one directory (one error line; called before anything is built or written)."""
    found = run_files(output_dir)
    if not found or overwrite:
        return
    if resume_from and os.path.abspath(os.path.dirname(resume_from.rstrip("/"))) == os.path.abspath(output_dir):
        return  # continuing the run that is there
    shown = ", ".join(sorted(found, key=lambda f: (not f.startswith("checkpoint"), f))[:3]) + (", ..." if len(found) > 3 else "")
    raise SystemExit(f"error: --output-dir {output_dir} holds another run ({shown}): --resume auto continues it, "
                     "--overwrite replaces it, or pass another --output-dir")


def clear_run(output_dir: str) -> None:
    """--overwrite (or --resume auto with no checkpoint): remove the previous run's files (nothing else in the
    directory), and say what they were."""
    found = run_files(output_dir)
    if found:
        try:
            with open(os.path.join(output_dir, "config.json")) as f:
                was = json.load(f)
            what = f"its run (--recipe {was.get('recipe', '?')}, --max-steps {was.get('max_steps', '?')})"
        except (OSError, ValueError):
            what = "its run"
        cks = [f for f in found if f.startswith("checkpoint-")]
        # (said the same way for --overwrite and for --resume auto restarting a run that left no checkpoint)
        say(f"{output_dir}: replacing {what}: {len(found) - len(cks)} files and {len(cks)} checkpoints removed")
    for f in found:
        p = os.path.join(output_dir, f)
        shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)


def resolve_resume(resume: str, output_dir: str) -> str | None:
    """The checkpoint --resume names ('auto': the newest in output_dir, None if there is none)."""
    if not resume:
        return None
    if resume == "auto":
        return latest_checkpoint(output_dir)
    if not os.path.exists(resume):
        raise SystemExit(f"error: --resume {resume!r}: does not exist")
    if not os.path.exists(os.path.join(resume, "trainer_state.pt")):
        raise SystemExit(f"error: --resume {resume!r}: not a checkpoint directory (no trainer_state.pt)")
    if not any(os.path.exists(os.path.join(resume, f)) for f in ("config.json", "adapter_config.json")):
        raise SystemExit(f"error: --resume {resume!r}: its model is missing (no config.json or adapter_config.json; "
                         "expected a checkpoint-N directory written by train.py)")
    return resume


def restart_config(output_dir: str, builtin_models=(), model: str | None = None) -> dict | None:
    """--resume auto on a run that stopped before its first checkpoint: that run's settings, from its config.json
    (None: the directory holds no run, and a fresh run starts with the flags given). Its "model" is the resolved path;
    one of `builtin_models` (what --model '' resolves to) goes back to '', and the folder a named model resolves to
    (`model`, the --model given: tools/smollm2.py's name) back to that name, so the run is rebuilt as it was started."""
    path = os.path.join(output_dir, "config.json")
    if not os.path.exists(path):
        say(f"no checkpoint in {output_dir}: starting fresh")
        return None
    try:
        with open(path) as f:
            saved = json.load(f)
    except (OSError, ValueError) as e:
        raise SystemExit(f"error: --resume auto: {path} cannot be read ({type(e).__name__}: {e}); "
                         "--overwrite replaces that run") from None
    if saved.get("model") and os.path.realpath(saved["model"]) in {os.path.realpath(m) for m in builtin_models}:
        saved["model"] = ""
    if model and saved.get("model") and os.path.realpath(saved["model"]) == os.path.realpath(named_path(model)):
        saved["model"] = model
    return saved


def named_path(model: str) -> str:
    """The folder `--model NAME` resolves to (tools/smollm2.py's name), without converting anything; a path as it is."""
    from tools import smollm2

    return smollm2.cache_path() if model == smollm2.NAME else model


def check_finished(ckpt: str, max_steps: int, output_dir: str) -> None:
    """--resume on a run that is finished (its final checkpoint and summary.json): say so, exit 0, change nothing."""
    step = int(ckpt.rstrip("/").rsplit("-", 1)[-1])
    if step >= max_steps and os.path.exists(os.path.join(output_dir, "summary.json")):
        say(f"{output_dir}: its run is finished (step {step} of {max_steps}, summary.json): nothing to resume; "
            f"--max-steps N (more than {step}) continues it")
        raise SystemExit(0)


def saved_config(ckpt: str) -> dict:
    """The run's settings as its checkpoint recorded them (run_config.json)."""
    path = os.path.join(ckpt, "run_config.json")
    if not os.path.exists(path):
        raise SystemExit(f"error: --resume {ckpt}: no run_config.json: a checkpoint of an earlier version of train.py "
                         "(resume it with that version, or start a new run in another --output-dir)")
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise SystemExit(f"error: --resume {ckpt}: {path} cannot be read ({type(e).__name__}: {e})") from None


def flag_name(k: str) -> str:
    return "--" + k.replace("_", "-")


def resumed(settings: dict, given: dict, rules: dict, builtin_models=list) -> dict:
    """The run's settings. `settings`: the command line's over the defaults; `given`: the flags it gives (field ->
    value); `rules`: each field's resume rule (RESUME_RULES); `builtin_models()`: what --model '' resolves to
    (restart_config). Without --resume, `settings`; with it, the checkpoint's saved settings (or, --resume auto before
    the first checkpoint, the run's config.json) with the flags given checked against them (resume_settings), and one
    line saying what it resumes; --resume auto on a directory that holds no run: a fresh run with `settings`. Saved
    settings that lack one of `settings` are an earlier version's: one error line naming what they lack."""
    resume, output_dir = settings["resume"], settings["output_dir"]
    if not resume:
        return settings
    if settings["overwrite"]:
        raise SystemExit(f"error: --overwrite: contradicts --resume {resume} (--resume continues the run, --overwrite "
                         "replaces it): give one of them")
    ckpt = resolve_resume(resume, output_dir)
    saved = saved_config(ckpt) if ckpt else restart_config(output_dir, builtin_models(), given.get("model"))
    if saved is None:  # --resume auto on a directory without a run: a fresh run
        return {**settings, "resume": "", "overwrite": True}
    where = ckpt or f"auto ({output_dir}/config.json)"
    missing = [flag_name(k) for k in settings if k not in saved]
    if missing:
        raise SystemExit(f"error: --resume {where}: its settings come from an earlier version of train.py, one "
                         f"without {', '.join(missing)} (resume it with that version, or start a new run in another "
                         "--output-dir)")
    given = {"output_dir": output_dir if resume == "auto" else os.path.dirname(ckpt.rstrip("/")), **given}
    merged = resume_settings(saved, given, settings["resume_override"], where, rules)
    # (no checkpoint: the run starts again from step 0 and replaces what it left, --overwrite's way)
    out = {**{k: merged[k] for k in settings}, "resume": ckpt or "", "overwrite": not ckpt}
    if ckpt:
        check_finished(ckpt, out["max_steps"], out["output_dir"])
        say(f"resuming from step {ckpt.rstrip('/').rsplit('-', 1)[-1]} of {out['output_dir']}")
    else:
        say(f"no checkpoint in {output_dir}: its run (--recipe {saved.get('recipe', '?')}, "
            f"--model {saved.get('model') or 'the built-in tiny model'}) starts again from step 0 with its settings "
            f"(its config.json)")
    return out


def resume_settings(saved: dict, given: dict, override: bool, ckpt: str, rules: dict) -> dict:
    """The resumed run's settings: the saved ones, with the flags `given` on the command line whose rule (`rules`,
    RESUME_RULES) is 'free' (and, with --resume-override, the 'checked' ones, each announced). One error line
    otherwise."""
    changed = {k: v for k, v in given.items() if k in saved and v != saved[k] and rules[k] != "free"}
    fixed = {k: v for k, v in changed.items() if rules[k] == "fixed" or not override}
    if fixed:
        what = ", ".join(f"{flag_name(k)} {v!r} (the run: {saved[k]!r})" for k, v in fixed.items())
        n_fixed = sum(rules[k] == "fixed" for k in fixed)
        hint = ("" if n_fixed == len(fixed) else "; --resume-override applies " + ("them" if not n_fixed else "those not "
                "about the model, data, recipe, seed or evaluation") + " with a warning each")
        raise SystemExit(f"error: --resume {ckpt}: {what} would change the run it continues (its settings are "
                         f"its checkpoint's: leave the flag out, or start a new run in another --output-dir{hint})")
    for k, v in changed.items():
        say(f"warning: --resume-override: {flag_name(k)} {v!r} replaces the run's {saved[k]!r} from here on")
    return {**saved, **given}


def write_run_config(path: str, cfg: dict) -> None:
    with open(path + ".tmp", "w") as f:
        json.dump(cfg, f, indent=1)
    os.replace(path + ".tmp", path)


def interrupted(output_dir: str, step: int | None, max_steps: int, launched_by_accelerate: bool, stop=()) -> None:
    """Ctrl-C: one line saying where the run stopped and how to continue it; exit status 130 (128 + SIGINT).

    Whatever still works beside the main thread is ended first, each object in `stop` by its .stop() (the
    --rollout-lag producer thread: async_rollout.Producer.stop) or .close() (reward worker processes), so that no
    thread is inside torch when the interpreter exits (that aborts: "terminate called without an active
    exception", exit 134) and no worker is left behind. A second Ctrl-C meanwhile is ignored. Were a thread still
    alive after that, or had a producer thread run, the process ends with os._exit(130) once the line is written
    (the files a run writes are closed after each write, so nothing is lost)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the one line, not a traceback from a second Ctrl-C
    clean = True
    for obj in stop:
        if obj is None:
            continue
        try:
            done = obj.stop() if hasattr(obj, "stop") else obj.close()
            # a thread that ran torch beside the main one (the producer) can leave C++ state that the interpreter's
            # exit still aborts on, even once joined (seen under load): such a run ends with os._exit as well
            clean = clean and done is not False and not hasattr(obj, "stop")
        except Exception:  # noqa: BLE001 (a part that fails to stop must not cost the line)
            clean = False
    if main_process() and sys.stderr.isatty():
        print(file=sys.stderr)  # below the progress bar's line
    ck = latest_checkpoint(output_dir)
    where = ("before the first step" if step is None else f"during step {step + 1} of {max_steps}" if step < max_steps
             else f"during the final evaluation (after step {max_steps} of {max_steps})")
    cmd = f"{'accelerate launch ... ' if launched_by_accelerate else 'python '}train.py --output-dir {output_dir} --resume auto"
    if ck:
        say(f"interrupted {where}; last checkpoint: {ck}; resume with: {cmd}")
    else:
        say(f"interrupted {where}; no checkpoint yet (--save-every): the same command with --resume auto starts "
            f"this run again from step 0 with its settings: {cmd}")
    if not clean:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(130)
    raise SystemExit(130)
