"""Two "machines" on localhost: train.py under two `accelerate launch` processes with `--num_machines 2`, machine ranks
0 and 1, the first machine's address (127.0.0.1), one process each, gloo on CPU -- the command docs/multi_gpu.md and
examples/slurm-multinode.sh give for N nodes of 8 GPUs, at 2 x 1. A DAPO run (dynamic sampling: several generation
rounds per step) of 4 steps, checking:
  * only the global main process (machine 0) writes the run directory; machine 1's process is its node's local main
    (local rank 0) but global rank 1, and writes nothing there (tests/multinode_run.py audits every Python-level
    write under --output-dir, every prompt draw and each process's share of it);
  * each draw is the same on both machines and their shares differ and, in rank order, make up the whole draw;
  * (slow) the run equals the same run on 2 processes of one machine bit for bit (metrics and weights: the same
    world size, ranks, gloo reductions and order);
  * (slow) killing machine 1's process after the step-2 checkpoint, then relaunching both with --resume auto,
    continues exactly: metrics and step-4 weights equal the uninterrupted run's.
and that a run directory the processes do not all see, or checkpoints they disagree on, stop every process with one
line (runs.check_shared_run_dir).

Run:  python -m pytest -q tests/test_multinode.py             (~1 min: one 2-machine run)
      python -m pytest -q -m slow tests/test_multinode.py     (~5 min on 2 shared cores: + the 1-machine run, the kill
                                                                and resume, the SLURM script on stub nodes)
"""
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

import runs
from tests.test_multiprocess import _free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMEOUT = 600
ARGS = ["--recipe", "dapo", "--batch-size", "16", "--group-size", "4", "--mini-batch-size", "8", "--micro-batch-size", "4",
        "--max-steps", "4", "--save-every", "2", "--keep-checkpoints", "0", "--eval-problems", "8", "--eval-every", "0",
        "--max-new-tokens", "40", "--reward-workers", "0", "--max-gen-rounds", "20", "--seed", "3"]

pytestmark = pytest.mark.skipif(not (torch.distributed.is_available() and torch.distributed.is_gloo_available()),
                                reason="torch.distributed with gloo is needed")


def start(machines: int, rank: int, port: int, model: str, out, audit, *args) -> subprocess.Popen:
    """One machine's `accelerate launch` (its own process group, so that it can be killed as a node dies)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", GRPO_AUDIT_DIR=str(audit), PYTHONPATH=ROOT)
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_machines", str(machines),
           "--num_processes", "2", "--machine_rank", str(rank), "--main_process_ip", "127.0.0.1",
           "--main_process_port", str(port), "--mixed_precision", "no", "--dynamo_backend", "no",
           "tests/multinode_run.py", "--model", model, "--output-dir", str(out), *ARGS, *args]
    os.makedirs(audit, exist_ok=True)
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def finish(p: subprocess.Popen, what: str) -> tuple[str, str]:
    try:
        out, err = p.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
    assert p.returncode == 0, f"{what}: exit {p.returncode}\n--- stdout\n{out[-2000:]}\n--- stderr\n{err[-5000:]}"
    return out, err


def run_machines(machines: int, model: str, out, audit, *args) -> list[tuple[str, str]]:
    port = _free_port()
    ps = [start(machines, r, port, model, out, audit, *args) for r in range(machines)]
    return [finish(p, f"machine {r}") for r, p in enumerate(ps)]


def audit_rows(audit, rank: int) -> list[dict]:
    path = os.path.join(audit, f"rank{rank}.jsonl")
    return [json.loads(line) for line in open(path)] if os.path.exists(path) else []


def metrics(out) -> list[dict]:
    rows = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    return [{k: v for k, v in r.items() if not k.startswith(("perf/", "time/")) or k in ("perf/grad_norm", "perf/lr")}
            for r in rows]


def weights(ckpt) -> dict:
    from safetensors.torch import load_file

    return load_file(os.path.join(ckpt, "model.safetensors"))


@pytest.fixture(scope="module")
def two_machines(trained_model_path, tmp_path_factory):
    """The 2-machine run (4 steps), shared by the tests below: (run directory, audit directory, stdout per machine)."""
    base = tmp_path_factory.mktemp("two-machines")
    out, audit = base / "run", base / "audit"
    t0 = time.time()
    stdouts = [o for o, _ in run_machines(2, trained_model_path, out, audit)]
    print(f"2-machine run: {time.time() - t0:.0f} s")
    return out, audit, stdouts


def test_only_the_global_main_process_writes_the_run_directory(two_machines):
    out, audit, stdouts = two_machines
    r0, r1 = audit_rows(audit, 0), audit_rows(audit, 1)
    ranks = [next(r["ranks"] for r in rows if "ranks" in r) for rows in (r0, r1)]
    assert [(k["process_index"], k["local_process_index"], k["GROUP_RANK"], k["LOCAL_WORLD_SIZE"]) for k in ranks] == [
        (0, 0, "0", "1"), (1, 0, "1", "1")]  # one process per machine: both local rank 0, global ranks 0 and 1
    assert ranks[0]["is_main_process"] and not ranks[1]["is_main_process"] and ranks[1]["is_local_main_process"]
    writes0, writes1 = [r for r in r0 if "write" in r], [r for r in r1 if "write" in r]
    assert writes1 == [], writes1[:5]  # machine 1's local main writes nothing under the run directory
    written = {r["path"] for r in writes0}
    assert {"metrics.jsonl", "evals.jsonl", "samples.jsonl", "summary.json", "config.json.tmp",
            "checkpoint-2.tmp", "checkpoint-4.tmp"} <= written, sorted(written)
    assert sorted(os.listdir(out)) == ["checkpoint-2", "checkpoint-4", "config.json", "curves.png", "evals.jsonl",
                                       "metrics.jsonl", "samples.jsonl", "summary.json"]  # no probe file left behind
    assert [r["step"] for r in metrics(out)] == [1, 2, 3, 4]  # one row per step: written once
    assert stdouts[0].count("held-out greedy accuracy:") == 1 and "held-out" not in stdouts[1]


def test_the_machines_share_each_draw(two_machines):
    """Dynamic sampling draws 3 x 4 prompts a round, possibly several rounds a step: the same global draw on both
    machines (the samplers in lockstep), each keeps its own contiguous half, the halves differ and make up the draw."""
    _, audit, _ = two_machines
    r0, r1 = audit_rows(audit, 0), audit_rows(audit, 1)
    draws0, draws1 = [r["draw"] for r in r0 if "draw" in r], [r["draw"] for r in r1 if "draw" in r]
    slices0, slices1 = [r["slice"] for r in r0 if "slice" in r], [r["slice"] for r in r1 if "slice" in r]
    assert draws0 == draws1 and len(draws0) == len(slices0) == len(slices1) >= 4  # >= 1 round per step
    for d, a, b in zip(draws0, slices0, slices1):
        assert len(d) == 12 and a + b == d and len(a) == len(b) == 6 and set(a) != set(b)
    steps = [r["step"] for r in r0 if "slice" in r]
    assert sorted(set(steps)) == [0, 1, 2, 3]


@pytest.mark.slow
def test_two_machines_equal_one_machine(two_machines, trained_model_path, tmp_path):
    """The same run on 2 processes of one machine: metrics and weights equal bit for bit (same world size, ranks and
    gloo reductions; only the rendezvous differs)."""
    out2, _, _ = two_machines
    out1, audit1 = tmp_path / "run", tmp_path / "audit"
    run_machines(1, trained_model_path, out1, audit1)
    assert metrics(out1) == metrics(out2)
    for step in (2, 4):
        w1, w2 = weights(out1 / f"checkpoint-{step}"), weights(out2 / f"checkpoint-{step}")
        assert w1.keys() == w2.keys() and all(torch.equal(w1[k], w2[k]) for k in w1), step
    s1, s2 = (json.load(open(o / "summary.json")) for o in (out1, out2))
    assert {k: v for k, v in s1.items() if k != "wall_time_s"} == {k: v for k, v in s2.items() if k != "wall_time_s"}


@pytest.mark.slow
def test_kill_one_machine_then_resume_both(two_machines, trained_model_path, tmp_path):
    """Machine 1's processes killed (SIGKILL to its training process and its launcher) once the step-2 checkpoint is there; machine 0
    then fails in its next collective; both relaunched with --resume auto continue to the uninterrupted run's end."""
    full, _, _ = two_machines
    out, audit = tmp_path / "run", tmp_path / "audit"
    port = _free_port()
    ps = [start(2, r, port, trained_model_path, out, audit) for r in range(2)]
    t0 = time.time()
    while not (out / "checkpoint-2").is_dir():
        assert time.time() - t0 < TIMEOUT and all(p.poll() is None for p in ps), "no checkpoint-2"
        time.sleep(0.05)
    worker = next(r["ranks"]["pid"] for r in audit_rows(audit, 1) if "ranks" in r)
    os.kill(worker, signal.SIGKILL)  # the training process (torchrun starts it in a session of its own)
    os.killpg(ps[1].pid, signal.SIGKILL)  # and machine 1's launcher: the node is gone
    ps[1].communicate()
    try:
        ps[0].communicate(timeout=120)  # gloo sees the peer gone
    except subprocess.TimeoutExpired:
        os.killpg(ps[0].pid, signal.SIGKILL)
        ps[0].communicate()
    assert ps[0].returncode != 0  # interrupted: the run did not finish
    assert not (out / "checkpoint-4").exists() and runs.latest_checkpoint(str(out)).endswith("checkpoint-2")
    (_, err0), (_, err1) = run_machines(2, trained_model_path, out, audit, "--resume", "auto")
    assert f"resuming from step 2 of {out}" in err0 and "resuming" not in err1  # said once, by the main process
    assert metrics(out) == metrics(full)
    w1, w2 = weights(out / "checkpoint-4"), weights(full / "checkpoint-4")
    assert w1.keys() == w2.keys() and all(torch.equal(w1[k], w2[k]) for k in w1)


class _FakeAccelerator:
    num_processes, is_main_process = 2, True


def _gathers(monkeypatch, other):
    """all_gather_object as two processes would fill it: this one (the main) and `other`'s (seen, checkpoint, node)."""
    calls = []

    def fake(dst, obj):
        calls.append(obj)
        dst[0] = obj
        dst[1] = None if len(calls) == 1 else other
    monkeypatch.setattr(torch.distributed, "all_gather_object", fake)
    return calls


def test_a_run_directory_one_node_cannot_see_stops_every_process(tmp_path, monkeypatch):
    calls = _gathers(monkeypatch, (False, None, "1"))
    with pytest.raises(SystemExit) as e:
        runs.check_shared_run_dir(_FakeAccelerator(), str(tmp_path / "run"), None)
    assert str(e.value).startswith(f"error: --output-dir {tmp_path / 'run'}: process 1 (node 1) cannot see what the "
                                   "main process writes there")
    assert os.path.dirname(calls[0]) == str(tmp_path) and os.listdir(tmp_path) == []  # probed in the parent, removed


def test_checkpoints_the_nodes_disagree_on_stop_every_process(tmp_path, monkeypatch):
    ck = tmp_path / "run" / "checkpoint-2"
    ck.mkdir(parents=True)
    _gathers(monkeypatch, (True, None, "1"))
    with pytest.raises(SystemExit) as e:
        runs.check_shared_run_dir(_FakeAccelerator(), str(tmp_path / "run"), str(ck))
    assert str(e.value) == (f"error: --resume: the processes found different checkpoints (process 0 (node 0): {ck}, "
                            "process 1 (node 1): none); every node must see the same run directory (docs/multi_gpu.md)")
    assert os.listdir(tmp_path / "run") == ["checkpoint-2"]
    _gathers(monkeypatch, (True, str(ck), "1"))
    runs.check_shared_run_dir(_FakeAccelerator(), str(tmp_path / "run"), str(ck))  # agreeing: no error


SRUN = """#!/usr/bin/env bash
# stand-in for SLURM's srun: the command once per node (SLURM_NNODES), in parallel, each with its own SLURM_NODEID
while [[ "$1" == --* ]]; do shift; done
pids=()
for ((i = 0; i < SLURM_NNODES; i++)); do SLURM_NODEID=$i SLURM_PROCID=$i "$@" & pids+=($!); done
rc=0; for p in "${pids[@]}"; do wait "$p" || rc=$?; done; exit $rc
"""


@pytest.mark.slow
def test_slurm_script_on_two_stub_nodes(tmp_path):
    """examples/slurm-multinode.sh as sbatch would run it, with stub srun / scontrol that start its tasks as two
    "nodes" on localhost (1 process each): the install check on each node, then the 8-GPU example's flags through
    configs/multinode.yaml at 2 x 1, on its rehearsal's stand-in and fixtures (tests/test_examples.py), 2 steps."""
    import test_examples as ex

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(SRUN)
    (bin_dir / "scontrol").write_text("#!/usr/bin/env bash\nprintf '127.0.0.1\\n127.0.0.1\\n'\n")
    for f in ("srun", "scontrol"):
        os.chmod(bin_dir / f, 0o755)
    kind, train_data, eval_data, extra, want = ex.EXAMPLES["qwen2.5-math-7b-dapo-8gpu.sh"]
    out = tmp_path / "run"
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", SLURM_NNODES="2", SLURM_JOB_NODELIST="node[0-1]",
               SLURM_SUBMIT_DIR=ROOT, GPUS_PER_NODE="1", MAIN_PORT=str(_free_port()), PYTHON=sys.executable,
               CHECK=f"{sys.executable} -m tools.check_install --no-vllm-import", PYTHONPATH=ROOT,
               MODEL=ex.standins.build(kind, str(tmp_path / "model")), DATA=os.path.join(ex.FX, train_data),
               EVAL_DATA=os.path.join(ex.FX, eval_data), OUT=str(out), OMP_NUM_THREADS="1",
               TOKENIZERS_PARALLELISM="false", LAUNCH_ARGS="--mixed_precision no --dynamo_backend no")
    r = subprocess.run(["bash", "examples/slurm-multinode.sh", *ex.SMALL, *extra], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 0, f"exit {r.returncode}\n--- stdout\n{r.stdout[-3000:]}\n--- stderr\n{r.stderr[-5000:]}"
    assert r.stdout.count("will use ") == 2  # the install check ran on both nodes
    assert r.stdout.count("held-out greedy accuracy:") == 1  # printed by the global main process only
    cfg = json.load(open(out / "config.json"))
    assert {k: cfg[k] for k in want} == want
    assert [json.loads(line)["step"] for line in open(out / "metrics.jsonl")] == [1, 2]
    assert (out / "checkpoint-2" / "adapter_config.json").exists()
