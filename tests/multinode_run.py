"""Driver for tests/test_multinode.py: train.py's main, unchanged, under `accelerate launch`, with an audit log per
process of what it writes under --output-dir, the prompts it draws and keeps, and its ranks.

    GRPO_AUDIT_DIR=DIR accelerate launch --multi_gpu --num_machines 2 --machine_rank R ... tests/multinode_run.py ARGS

DIR/rank<R>.jsonl gets one row per event: {"ranks": ...} once (its pid, global / local process index, main / local
main, device, the launcher's RANK, LOCAL_RANK, GROUP_RANK), {"write": op, "path": ...} for every Python-level write
under the run directory (open for writing, makedirs, replace, rename, remove, rmtree: the JSON files, the plot, the
checkpoint's temporary directory, its files written from Python and its rename; torch.save and safetensors write
from C++ / Rust inside that directory), {"draw": [...]} for every global prompt draw (trainer.samplers.EpochOrder.draw: the same on
every process) and {"slice": [...]} for the share of it the process keeps (trainer.collect.Collector.take_prompts).
"""
from __future__ import annotations

import builtins
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import train  # noqa: E402
from tools.cli import cli  # noqa: E402
from trainer import collect, samplers  # noqa: E402


def main() -> int:
    argv = sys.argv[1:]
    out = os.path.abspath(argv[argv.index("--output-dir") + 1])
    log = open(os.path.join(os.environ["GRPO_AUDIT_DIR"], f"rank{os.environ.get('RANK', '0')}.jsonl"), "a", buffering=1)

    def note(**kw):
        log.write(json.dumps(kw) + "\n")

    def under(p) -> bool:
        try:
            p = os.path.abspath(os.fspath(p))
        except TypeError:
            return False
        return p == out or p.startswith(out + os.sep)

    def audited(fn, op, writes=lambda *a, **k: True):
        def wrapper(path, *a, **k):
            if under(path) and writes(path, *a, **k):
                note(write=op, path=os.path.relpath(os.path.abspath(os.fspath(path)), out))
            return fn(path, *a, **k)
        return wrapper

    def open_writes(path, mode="r", *a, **k):
        return any(c in mode for c in "wax+")

    builtins.open = audited(builtins.open, "open", open_writes)
    for mod, name in [(os, "makedirs"), (os, "mkdir"), (os, "replace"), (os, "rename"), (os, "remove"), (os, "unlink"),
                      (shutil, "rmtree")]:
        setattr(mod, name, audited(getattr(mod, name), name))

    draw, take_prompts, setup = samplers.EpochOrder.draw, collect.Collector.take_prompts, train.setup

    def draw_logged(self, step, n):
        idx = draw(self, step, n)
        note(draw=[int(i) for i in idx])
        return idx

    def take_prompts_logged(self, plan, n_global, strided=False):
        idx = take_prompts(self, plan, n_global, strided)
        note(slice=[int(i) for i in idx], step=plan.step)
        return idx

    def setup_logged(cfg):
        run = setup(cfg)
        a = run.accelerator
        note(ranks={"pid": os.getpid(), "process_index": a.process_index, "local_process_index": a.local_process_index,
                    "num_processes": a.num_processes, "is_main_process": a.is_main_process,
                    "is_local_main_process": a.is_local_main_process, "device": str(a.device),
                    **{k: os.environ.get(k) for k in ("RANK", "LOCAL_RANK", "GROUP_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")}})
        return run

    samplers.EpochOrder.draw, collect.Collector.take_prompts, train.setup = draw_logged, take_prompts_logged, setup_logged
    return cli(train.main)


if __name__ == "__main__":
    sys.exit(main())
