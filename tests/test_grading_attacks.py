"""capsule_lab.grading: a student cannot talk their way past the grader (project issue 11).

Each attack is planted in a copy of a master notebook (so that the notebook's other, honest answers are
right) and graded by ``grade_notebook`` in a fresh kernel: the attacked task scores 0 with the status
that says why (``refused``, ``wrong``, ``error``, ``timeout``, ``not found``), the honest tasks keep
their points, and what the student's code printed, wrote or patched changes nothing. Four notebooks,
each graded once (session fixtures, one xdist group each):

- 02: the checker and the task registry monkeypatched in the kernel, forged result lines written where the
  old grader read them (``$CAPSULE_LAB_GRADE_RECORD``), the reference imported under another name;
- 01: the reference reached through a re-export, through a copy of its code object made while the cells
  load, and through ``importlib.reload``; a detached process that rewrites the reports after the kernel
  exits; every check cell deleted;
- 03: a table of the reference's answers computed while the cells load, the reference run in a subprocess,
  and a function under another name than the one the exercise asks for;
- 04: a function that never returns, a cell whose loop swallows ``KeyboardInterrupt`` and a plain
  ``while True: pass`` cell (the kernel is replaced, the later cells still run).
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell

from capsule_lab.grading import grade_notebook

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "solutions"


def fingerprint(path: Path) -> tuple:
    return hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns


def master(name: str):
    return nbformat.read(SOLUTIONS / name, as_version=4)


def function_cell(nb, name: str):
    (cell,) = [c for c in nb.cells if c.cell_type == "code" and c.source.startswith(f"def {name}(")]
    return cell


def replace_function(nb, name: str, source: str) -> None:
    function_cell(nb, name).source = source


def insert_after(nb, name: str, *sources: str) -> None:
    index = nb.cells.index(function_cell(nb, name))
    for k, source in enumerate(sources):
        nb.cells.insert(index + 1 + k, new_code_cell(source))


def graded(tmp_path_factory, label: str, nb, filename: str, **kwargs) -> dict:
    folder = tmp_path_factory.mktemp(label)
    path = folder / filename
    nbformat.write(nb, path)
    before = fingerprint(path)
    report = grade_notebook(path, **kwargs)
    return {"report": report, "before": before, "after": fingerprint(path), "folder": folder}


# ---------------------------------------------------------------- 02: patched checker, forged records, imported
# reference

PATCH_THE_CHECKER = """\
import dataclasses, os
import capsule_lab.grading.engine.checking as checking
from capsule_lab.grading import tasks
checking._run_checks = lambda task, fn: (None, "")             # every check agrees
for tid, task in list(tasks.TASKS.items()):                     # the references agree with anything
    tasks.TASKS[tid] = dataclasses.replace(task, reference=routing_step if tid == "02.routing_step" else task.reference)
for path in filter(None, [os.environ.get("CAPSULE_LAB_GRADE_RECORD")]):
    with open(path, "a") as f:
        for tid, pts in [("02.couplings", 1), ("02.routing_step", 2), ("02.dynamic_routing", 2)]:
            f.write(json.dumps({"task": tid, "passed": True, "points": pts, "max_points": pts, "message": ""}) + "\\n")
"""

IMPORTED_REFERENCE = """\
from capsule_lab.routing import dynamic_routing as _ref


def dynamic_routing(votes, iterations=3):
    return _ref(votes, iterations).poses
"""


@pytest.fixture(scope="session")
def patched_02(tmp_path_factory):
    nb = master("02_dynamic_routing.ipynb")
    cell = function_cell(nb, "routing_step")
    cell.source = cell.source.replace("return v, logits + agreement\n", "return v, logits + agreement.detach()\n")
    nb.cells.insert(nb.cells.index(cell) + 1, new_code_cell("import json\n" + PATCH_THE_CHECKER))
    replace_function(nb, "dynamic_routing", IMPORTED_REFERENCE)
    return graded(tmp_path_factory, "patched", nb, "02_dynamic_routing.ipynb", timeout=60)


@pytest.mark.notebook
@pytest.mark.xdist_group("grading-attack-02")
def test_patching_the_checker_or_importing_the_reference_earns_nothing(patched_02):
    report = patched_02["report"]
    tasks = report["tasks"]
    assert report["graded"] and report["grading_error"] is None
    assert tasks["02.couplings"]["status"] == "passed" and tasks["02.couplings"]["points"] == 1
    # the wrong answer stays wrong, whatever the kernel's checker and registry were made to say
    assert tasks["02.routing_step"]["status"] == "wrong" and tasks["02.routing_step"]["points"] == 0
    assert "detach" in tasks["02.routing_step"]["hint"]
    # `from capsule_lab.routing import dynamic_routing as _ref` is refused, not graded as the student's
    assert tasks["02.dynamic_routing"]["status"] == "refused" and tasks["02.dynamic_routing"]["points"] == 0
    assert "asks for your own implementation" in tasks["02.dynamic_routing"]["message"]
    # 02.couplings and the honest prediction and experiment (1 + 1 + 1) of 7 points
    assert report["score"] == 3 and report["max_score"] == 7
    assert patched_02["before"] == patched_02["after"], "grading modified the notebook"


# ---------------------------------------------------------------- 01: re-export, code copy, reload, detached process,
# no checks

REEXPORT = """\
import capsule_lab


def squash(s, dim=-1):
    return capsule_lab.squash(s, dim)
"""

CODE_COPY = """\
import types
import capsule_lab.capsules as _capsules
_f = _capsules.margin_loss
_copy = types.FunctionType(_f.__code__, _f.__globals__, "copy", _f.__defaults__)
_copy.__kwdefaults__ = _f.__kwdefaults__


def margin_loss(lengths, labels):
    return _copy(lengths, labels)
"""

RELOAD = """\
def primary_capsules(conv_out, capsule_dim):
    import importlib
    import capsule_lab.capsules as module
    return importlib.reload(module).conv_to_capsules(conv_out, capsule_dim)
"""

DETACHED = """\
import os, sys, subprocess
script = '''
import os, sys, time
for _ in range(300):                       # until the grader has written its reports, then overwrite them
    time.sleep(0.1)
    for name in os.listdir(sys.argv[1]):
        if name.endswith((".json", ".csv")):
            with open(os.path.join(sys.argv[1], name), "w") as f:
                f.write('{"score": 999}')
'''
subprocess.Popen([sys.executable, "-c", script, REPORTS], start_new_session=True,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
if os.fork() == 0:                         # and a double-forked daemon writing a marker every 0.1 s
    os.setsid()
    if os.fork() == 0:
        import time
        for _ in range(300):
            open(MARKER, "a").write("alive\\n")
            time.sleep(0.1)
        os._exit(0)
    os._exit(0)
"""


@pytest.fixture(scope="session")
def attacked_01(tmp_path_factory):
    nb = master("01_capsules.ipynb")
    replace_function(nb, "squash", REEXPORT)
    replace_function(nb, "margin_loss", CODE_COPY)
    replace_function(nb, "primary_capsules", RELOAD)
    nb.cells = [c for c in nb.cells if not (c.cell_type == "code" and c.source.startswith("check("))]
    folder = tmp_path_factory.mktemp("detached")
    reports, marker = folder / "reports", folder / "marker.txt"
    reports.mkdir()
    nb.cells.append(new_code_cell(f"REPORTS, MARKER = {str(reports)!r}, {str(marker)!r}\n" + DETACHED))
    # an honest copy of the same notebook, graded by the same call: the reports folder holds its report too
    honest = master("01_capsules.ipynb")
    honest.cells = [c for c in honest.cells if not (c.cell_type == "code" and c.source.startswith("check("))]
    paths = [folder / "01_capsules.ipynb", folder / "honest" / "01_capsules.ipynb"]
    paths[1].parent.mkdir()
    nbformat.write(nb, paths[0])
    nbformat.write(honest, paths[1])
    from capsule_lab.grading import grade

    # the grader's own gates, without the OS sandbox around them (which would stop the daemon before it starts:
    # tests/test_grading_sandbox.py grades attacks inside it)
    result = grade(paths, out_dir=reports, timeout=60, sandbox=False)
    written = {p.name: p.read_bytes() for p in reports.iterdir()}
    time.sleep(1.5)  # the detached processes, had they survived, write every 0.1 s
    return {"reports": result, "written": written, "folder": reports, "marker": marker,
            "after": {p.name: p.read_bytes() for p in reports.iterdir()}}


@pytest.mark.notebook
@pytest.mark.xdist_group("grading-attack-01")
def test_aliases_copies_reloads_and_detached_processes_earn_nothing(attacked_01):
    # (one test for the one fixture: with pytest 9.2 and xdist 3.8 here, xdist_group does not keep two
    # tests on one worker, and a second test would grade the notebooks again)
    report, honest = attacked_01["reports"]
    tasks = report["tasks"]
    assert tasks["01.squash"]["status"] == "refused"                      # capsule_lab.squash, a re-export
    assert tasks["01.margin_loss"]["status"] == "refused"                 # a copy of the code object
    assert tasks["01.primary_capsules"]["status"] == "error"              # importlib.reload cannot read it
    assert "refuses to open" in tasks["01.primary_capsules"]["message"]
    # the honest prediction passes; the experiment calls `squash`, whose task was refused: graded on its own, with
    # the course's stand-in in the place of that squash (issue 32: one mistake costs one task), it passes
    assert report["score"] == 2 and report["graded"]
    assert tasks["01.steps_to_long"]["passed"] and tasks["01.steps_to_long"]["stand_ins"] == ["01.squash"]
    # no check cell anywhere: the honest notebook still scores full marks, from the registry's tasks
    assert honest["score"] == honest["max_score"] == 5
    assert all(t["status"] == "passed" for t in honest["tasks"].values())

    # the processes the kernel detached were killed before the reports were written
    assert report["cell_errors"] == [] and attacked_01["marker"].exists(), "the daemon never started"
    assert attacked_01["after"] == attacked_01["written"], "a detached process rewrote a report"
    first = json.loads(attacked_01["written"][Path(report["report"]).name])
    assert first["score"] == 2 and first["max_score"] == 5  # the grader's own report, intact
    assert "grades.csv" in attacked_01["written"]
    marker = attacked_01["marker"]
    lines = marker.read_text().count("alive") if marker.exists() else 0
    time.sleep(0.5)
    assert (marker.read_text().count("alive") if marker.exists() else 0) == lines, "the daemon is still running"


@pytest.mark.slow
def test_notebook_without_the_function_scores_not_found(tmp_path):
    """Every task of the chapter is graded, found or not; no kernel needed to see it in the report."""
    from capsule_lab.grading.engine.evaluation import score_functions
    from capsule_lab.grading.tasks import tasks_for_chapter

    tasks = tasks_for_chapter("04")
    result = score_functions("04", ["import torch", None, "x = 1"], tmp_path, tasks, task_timeout=30)
    assert result["grading_error"] is None
    assert {tid: (o["status"], o["points"]) for tid, o in result["tasks"].items()} == {
        t.id: ("not found", 0) for t in tasks}
    assert all(f"no function named `{t.function}`" in result["tasks"][t.id]["message"] for t in tasks)


ESCAPES = [
    "import torch",
    # dyr: run the reference in a fresh interpreter through the primitive that raises no audit event
    """def dyr(couplings):
    import gc, os, sys, torch
    def named(o):
        try:
            return type(o).__name__ == "builtin_function_or_method" and o.__name__ == "fork_exec"
        except Exception:
            return False
    holders = [o for o in gc.get_objects() if isinstance(o, (dict, list))]
    found = [v for h in holders for v in (h.values() if isinstance(h, dict) else h) if named(v)]
    if not found:
        import _posixsubprocess
        fork_exec = _posixsubprocess.fork_exec
    raise AssertionError("found fork_exec")""",
    # dead_capsules: C's system() through ctypes
    """def dead_capsules(norms, mean_eps, std_eps):
    import ctypes
    ctypes.CDLL(None).system(b"true")
    return norms.mean(0) < 0""",
    # active_rate: honest
    """def active_rate(norms, eps):
    return (norms >= eps).to(norms.dtype).sum(dim=1).mean() / norms.shape[1]""",
]


def test_the_evaluation_process_cannot_start_processes_or_call_c(tmp_path):
    """The child's audit hook, without a kernel: no process, no ctypes; honest code unaffected."""
    from capsule_lab.grading.engine.evaluation import score_functions
    from capsule_lab.grading.tasks import tasks_for_chapter

    result = score_functions("04", ESCAPES, tmp_path, tasks_for_chapter("04"), task_timeout=30)
    tasks = result["tasks"]
    # (looking for the primitive through gc is refused first since deny by default, issue 30)
    assert tasks["04.dyr"]["status"] == "error" and any(
        reason in tasks["04.dyr"]["message"] for reason in ("start processes", "use gc.get_"))
    assert tasks["04.dead_capsules"]["status"] == "error" and "ctypes" in tasks["04.dead_capsules"]["message"]
    assert tasks["04.active_rate"]["status"] == "passed" and tasks["04.active_rate"]["points"] == 1


# ---------------------------------------------------------------- 03: precomputed table, subprocess, wrong name

TABLE = """\
from capsule_lab.measures.gradients import softmax_jacobian as _ref
from capsule_lab.grading.tasks.ch03 import _softmax_jacobian_cases
_TABLE = {tuple(c.args[0].flatten().tolist()): _ref(*c.args) for c in _softmax_jacobian_cases()}


def softmax_jacobian(c):
    return _TABLE[tuple(c.flatten().tolist())].clone().requires_grad_(c.requires_grad)
"""

SUBPROCESS = """\
def term1(couplings, sums, grad_poses):
    import subprocess, sys, tempfile, torch
    folder = tempfile.mkdtemp()
    torch.save((couplings, sums, grad_poses), folder + "/in.pt")
    subprocess.run([sys.executable, "-c",
        "import sys, torch; from capsule_lab.grading.tasks.ch03 import _ref_term1; "
        "torch.save(_ref_term1(*torch.load(sys.argv[1] + '/in.pt')), sys.argv[1] + '/out.pt')", folder], check=True)
    return torch.load(folder + "/out.pt")
"""


@pytest.fixture(scope="session")
def attacked_03(tmp_path_factory):
    nb = master("03_routing_gradients.ipynb")
    replace_function(nb, "softmax_jacobian", TABLE)
    replace_function(nb, "term1", SUBPROCESS)
    routing = function_cell(nb, "routing")
    routing.source = routing.source.replace("def routing(", "def my_routing(", 1)
    return graded(tmp_path_factory, "attacked-03", nb, "03_routing_gradients.ipynb", timeout=60)


@pytest.mark.notebook
@pytest.mark.xdist_group("grading-attack-03")
def test_precomputed_answers_subprocesses_and_wrong_names_earn_nothing(attacked_03):
    report = attacked_03["report"]
    tasks = report["tasks"]
    # the table is built while the cells load, when the reference already refuses: the function fails
    assert tasks["03.softmax_jacobian"]["status"] == "error" and tasks["03.softmax_jacobian"]["points"] == 0
    assert any("asks for your own implementation" in e["error"] for e in report["definition_errors"])
    assert tasks["03.constant_coupling_gradient"]["status"] == "error"
    assert "start processes" in tasks["03.constant_coupling_gradient"]["message"]
    assert tasks["03.detached_routing"]["status"] == "not found"
    # every attacked task earns nothing; the honest prediction (1 point) scores, and the mini-experiment (2), which
    # calls `routing`, is graded with the course's stand-in for the missing one
    assert report["score"] == 3 and tasks["03.term2_exponent"]["passed"]
    assert tasks["03.term2_ratio"]["passed"] and tasks["03.term2_ratio"]["stand_ins"] == ["03.detached_routing"]
    assert attacked_03["before"] == attacked_03["after"]


# ---------------------------------------------------------------- 04: time limits

SWALLOWS_INTERRUPTS = """\
import time
while True:
    try:
        time.sleep(0.05)
    except KeyboardInterrupt:
        pass
"""

NEVER_RETURNS = """\
def dyr(couplings):
    while True:
        pass
"""

TIMEOUT = 4


@pytest.fixture(scope="session")
def stalling_04(tmp_path_factory):
    nb = master("04_dead_capsules.ipynb")
    replace_function(nb, "dyr", NEVER_RETURNS)
    first_check = next(i for i, c in enumerate(nb.cells) if c.source.startswith('check("04.dyr"'))
    nb.cells.insert(first_check + 1, new_code_cell(SWALLOWS_INTERRUPTS))
    nb.cells.insert(first_check + 2, new_code_cell("while True:\n    pass"))
    # the honest tasks get 3 × the cells' limit: at 4 s the score fell 2 points short on a busy 2-core machine (2 of 3
    # runs beside the grading-limits tests, dead_capsules and active_rate passing), while the endless dyr still
    # meets its limit
    result = graded(tmp_path_factory, "stalling", nb, "04_dead_capsules.ipynb", timeout=TIMEOUT,
                    task_timeout=3 * TIMEOUT)
    result.update(check_cell=first_check, swallow_cell=first_check + 1, loop_cell=first_check + 2)
    return result


@pytest.mark.notebook
@pytest.mark.xdist_group("grading-attack-04")
def test_time_limits_in_the_kernel_and_in_the_evaluation(stalling_04):
    report = stalling_04["report"]
    tasks = report["tasks"]
    assert tasks["04.dyr"]["status"] == "timeout" and tasks["04.dyr"]["points"] == 0
    assert tasks["04.dead_capsules"]["status"] == "passed" and tasks["04.active_rate"]["status"] == "passed"
    assert report["score"] == report["max_score"] - 2
    # both loops time out (the check cell of dyr runs nothing in the grader's kernel); the kernel that swallowed the
    # interrupt is replaced, and the cells after it still run (in a fresh kernel: the grade does not depend on its
    # state)
    # (a cell before the first check — the imports of torch and the package — can pass the 4 s limit on a loaded
    # machine: seen once, with another grading run beside this one; the limit under test is the loops')
    late = [c for c in report["timeout_cells"] if c > stalling_04["check_cell"]]
    assert late == [stalling_04["swallow_cell"], stalling_04["loop_cell"]], report["timeout_cells"]
    restarts = [r for r in report["kernel_restarts"] if r["cell"] > stalling_04["check_cell"]]
    assert restarts == [{"cell": stalling_04["swallow_cell"], "why": "the kernel did not respond after the timeout"}]
    assert report["aborted"] is None and report["graded"]
    assert report["duration_s"] < 90
    assert stalling_04["before"] == stalling_04["after"]
