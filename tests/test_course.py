"""The course (course/*.ipynb): every notebook runs top to bottom in a real Jupyter kernel (nbclient), makes at least
one plot, and ends with an exercise whose check really checks: the checks accept the answers in course/solutions.py
and reject a plausible wrong answer. The notebooks are committed with their outputs, so that a student reads them
without running anything; each run here is compared with what is committed (course/notebooks.py: text exactly once
run-to-run noise is normalised, figures by their presence), and a stale output fails: `python course/notebooks.py`
writes them again.

Run:  python -m pytest -q tests/test_course.py      (~4 min on 2 cores: the notebooks' short training runs)
"""
import glob
import os
import sys

import nbformat
import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COURSE = os.path.join(ROOT, "course")
NOTEBOOKS = sorted(glob.glob(os.path.join(COURSE, "*.ipynb")))
sys.path.insert(0, COURSE)
import check  # noqa: E402
import notebooks  # noqa: E402
import solutions  # noqa: E402


def test_there_is_a_course():
    assert len(NOTEBOOKS) >= 7, NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_notebook_is_committed_with_its_outputs_and_an_exercise(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    counts = [c.execution_count for c in code]
    assert counts == list(range(1, len(code) + 1)), f"execution counts {counts}: run `python course/notebooks.py`"
    assert nb.metadata.get("outputs_from"), "no outputs_from in the metadata: written by `python course/notebooks.py`?"
    assert any("plt." in c.source for c in code), "no plot"
    assert any("image/png" in o.get("data", {}) for c in code for o in c.outputs), "no figure committed"
    stubs = [i for i, c in enumerate(code) if "raise NotImplementedError" in c.source and c.source.startswith("def my_")]
    assert stubs, "no exercise"
    name = code[stubs[-1]].source.split("(")[0][len("def "):]
    checking = code[stubs[-1] + 1]
    assert "check." in checking.source and name in checking.source, "the exercise is not checked"
    shown = "".join(o.get("text", "") for o in checking.outputs)
    assert "not written yet" in shown, "the committed check cell shows the unwritten exercise's line"
    assert not any(o.output_type == "error" for c in code for o in c.outputs), "a committed cell shows an error"


def _wrong_answers():
    """A plausible mistake per exercise (a tuple: several): each check must reject it."""
    return {
        "group_advantages": lambda r, g: (lambda x: ((x - x.mean(1, keepdim=True)) / (x.std(1, unbiased=False, keepdim=True) + 1e-6)).view(-1))(r.view(-1, g)),
        "clip_higher": lambda lp, old, a, lo, hi: solutions.clip_higher(lp, old, a, lo, lo),  # symmetric clip
        "entropy_controller": lambda es, t, d, cm: solutions.entropy_controller(es, t, d, 1.0),  # no upper clamp
        "budget_select": lambda lens, b: torch.tensor([n if sum(lens[:i + 1]) <= b else 0 for i, n in enumerate(lens)]),
        "test_difficulty_reward": lambda p, lv, m: sum(p) / len(p),  # plain fraction of tests
        "reject_zero_advantage": lambda r, g: r.view(-1, g).sum(1) > 0,  # keeps all-right groups
        "tis_weights": lambda t, e, m, c: torch.exp(t - e).clamp(max=c),  # ignores the mask
        "cispo_loss": (lambda lp, old, a, lo, hi: -torch.exp(lp - old).clamp(1 - lo, 1 + hi) * a[:, None] * lp,  # no detach
                       lambda lp, old, a, lo, hi: solutions.cispo_loss(lp, old, a, 0.2, hi)),  # PPO's floor, 1 - 0.2
        "overlong_penalty": (lambda y, m, c: (((m - c) - torch.as_tensor(y).float()) / c).clamp(max=0.0),  # no floor at -1
                             lambda y, m, c: (((m - c) - torch.as_tensor(y).float()) / m).clamp(-1.0, 0.0)),  # / L_max
    }


@pytest.mark.parametrize("name", list(_wrong_answers()))
def test_exercise_check_accepts_the_answer_and_rejects_a_mistake(name, capsys):
    chk = getattr(check, name)
    assert chk(getattr(solutions, name)) is True
    assert "\N{CHECK MARK}" in capsys.readouterr().out
    wrong = _wrong_answers()[name]
    for mistake in wrong if isinstance(wrong, tuple) else (wrong,):
        with pytest.raises(AssertionError, match=f"^{name}: differs from"):
            chk(mistake)

    def unwritten(*a):
        raise NotImplementedError

    assert chk(unwritten) is False and "not written yet" in capsys.readouterr().out


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_notebook_runs_top_to_bottom_as_committed(path, tmp_path):
    """Run in a fresh kernel, the notebook draws its figures, leaves the exercise to the student, prints nothing that
    depends on where the checkout is, and prints what the committed notebook shows (course/notebooks.py: `stale`)."""
    name = os.path.basename(path)
    try:
        fresh = notebooks.execute(path, runs=str(tmp_path / "grpo-course-runs"))
    except notebooks.CellFailed as e:
        pytest.fail(str(e), pytrace=False)
    code = [c for c in fresh.cells if c.cell_type == "code"]
    images = sum("image/png" in o.get("data", {}) for c in code for o in c.outputs)
    assert images >= 1, "no figure was drawn"
    text = "".join(t for c in code for t in notebooks.shown(c)[0])
    assert "not written yet" in text  # the exercise is left to the student, and its check ran
    assert ROOT not in text, f"{name} prints the checkout's path ({ROOT}): its committed outputs would differ elsewhere"
    diff = notebooks.stale(nbformat.read(path, as_version=4), fresh)
    assert not diff, (f"course/{name}'s committed outputs are stale (`python course/notebooks.py {name[:2]}` writes "
                      "them again):\n  " + "\n  ".join(diff))
