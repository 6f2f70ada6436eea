"""capsule_lab.grading.engine.lock: deny by default (project issue 30).

While a student's function runs, nothing of ``capsule_lab`` may be called but what the task allows
(``Task.allowed``). Tested by enumeration, not by the routes we know: every public callable of every module of
the package (functions, classes — constructing them — and their public methods, static and class methods and
properties), called from a stand-in student function under every registered task's refusal, raises
``AnswerRefused`` naming itself at call entry (with no or nonsense arguments, so that it is the refusal and
not the function that raises), unless the task allows it. Then: what an allowed function calls runs; the
package's own code calls freely; every code is put back afterwards; a package function handed in as the
student's function is refused too; and one real grading (the evaluation child, ``deny_for_good``) of an
exercise-01 notebook whose squash is another chapter's helper scores it "refused", naming the helper.
"""

from __future__ import annotations

import inspect
import time
import types

import nbformat
import pytest
import torch

import capsule_lab
from capsule_lab.grading import AnswerRefused, check, get_task, grade_notebook, task_ids
from capsule_lab.grading.engine.lock import call_student, denied, package_functions, package_modules, resolve_allowed
from capsule_lab.grading.engine.refusal import qualified_name
from test_grading_attacks import master, replace_function


def _ours(obj) -> bool:
    module = vars(obj).get("__module__") if isinstance(obj, type) else getattr(obj, "__module__", None)
    return isinstance(module, str) and module.split(".")[0] == "capsule_lab"


def _runs_package_code(fn) -> bool:
    """A plain function whose code is the package's (not a decorator's wrapper from torch or contextlib)."""
    return isinstance(fn, types.FunctionType) and not fn.__code__.co_filename.startswith(("/usr", "/root", "<frozen"))


def public_callables() -> list:
    """``(qualified name, what to call, the functions it must run first)`` for every public callable of every
    module of capsule_lab (re-exports once), its public classes' constructors and their public methods. Not
    :func:`~capsule_lab.grading.engine.lock.call_student`: its code is not the package's (that is its point), and a
    function called through it sees a caller that is not the package's either."""
    out, seen = [], set()
    for module in package_modules():
        for name, obj in sorted(vars(module).items()):
            if name.startswith("_") or id(obj) in seen or not _ours(obj) or obj is call_student:
                continue
            seen.add(id(obj))
            if isinstance(obj, type):
                init = [f for f in (obj.__init__, obj.__new__, getattr(obj, "__post_init__", None))
                        if isinstance(f, types.FunctionType) and _ours(f)]
                if init:  # a class whose construction runs none of the package's code computes nothing
                    out.append((qualified_name(obj), obj, init))
                for attr, value in vars(obj).items():
                    if attr.startswith("_"):
                        continue
                    if isinstance(value, property) and isinstance(value.fget, types.FunctionType):
                        out.append((qualified_name(value.fget), value.fget, [value.fget]))
                    elif isinstance(value, (staticmethod, classmethod)) or isinstance(value, types.FunctionType):
                        fn = getattr(obj, attr)
                        out.append((f"{qualified_name(obj)}.{attr}", fn, [inspect.unwrap(getattr(fn, "__func__", fn))]))
            elif callable(obj):
                out.append((qualified_name(obj), obj, [inspect.unwrap(obj)]))
    return out


CALLABLES = public_callables()

#: The stand-in student function: its code is not the package's (a notebook cell's file name). A generator
#: that a decorator wraps in one of its own (``torch.no_grad()`` on ``training.outputs``) runs nothing of the
#: package until its first item is asked for: then it is refused.
STUDENT = compile("def student(target):\n    result = target()\n"
                  "    return next(result) if type(result).__name__ == 'generator' else result\n", "<cell 4>", "exec")


def student_function():
    namespace: dict = {}
    exec(STUDENT, namespace)
    return namespace["student"]


def test_the_enumeration_sees_the_whole_package():
    names = {name for name, _, _ in CALLABLES}
    assert len(CALLABLES) > 300
    assert {"capsule_lab.capsules.squash", "capsule_lab.routing.procedure.dynamic_routing",
            "capsule_lab.grading.tasks.registry.get_task", "capsule_lab.grading.engine.checking.check",
            "capsule_lab.studies.bench.runner.run_router_bench", "capsule_lab.models.deep_capsnet.DeepCapsNet",
            "capsule_lab.models.deep_capsnet.DeepCapsNet.routers"} <= names
    gated = {id(fn) for fn in package_functions()}
    # every function the enumeration calls is one the gates cover (decorators' wrappers lead to one)
    for name, _, first in CALLABLES:
        assert any(id(fn) in gated for fn in first if _runs_package_code(fn)), name


def test_every_public_callable_is_refused_unless_the_task_allows_it():
    start = time.perf_counter()
    student = student_function()
    checked = 0
    expected = [(name, target, [qualified_name(fn) for fn in first], first) for name, target, first in CALLABLES]
    for task_id in task_ids():
        task = get_task(task_id)
        allowed = {id(fn) for fn in resolve_allowed(task.allowed)}
        with denied(task):   # from here on the test's own code is "not the package's" too: no package calls
            for name, target, names, first in expected:
                if any(id(fn) in allowed for fn in first):
                    continue
                with pytest.raises(AnswerRefused) as refusal:
                    call_student(student, target)
                message = str(refusal.value)
                assert any(n in message for n in names), (task_id, name, message)
                assert f"task {task_id}" in message or "asks for your own implementation" in message, message
                checked += 1
    assert checked > 300 * len(task_ids()) * 0.9
    assert time.perf_counter() - start < 30


def test_what_a_task_allows_runs_and_what_it_calls_runs_too():
    student = student_function()
    from capsule_lab.capsules import squash
    from capsule_lab.routing import dynamic_routing

    s = torch.randn(3, 4, dtype=torch.float64)
    with denied(get_task("02.routing_step")):
        got = call_student(student, lambda: squash(s))    # a lambda of the test: not the package's code
    n2 = (s * s).sum(-1, keepdim=True)
    torch.testing.assert_close(got, n2 / (1 + n2) * s / n2.sqrt())
    votes = torch.randn(2, 5, 3, 4, dtype=torch.float64)
    with denied(get_task("05.entropy_vs_iterations")):   # dynamic_routing is allowed, and runs squash inside
        routed = call_student(student, lambda: dynamic_routing(votes, 3))
        with pytest.raises(AnswerRefused, match="capsule_lab.capsules.squash .*task 05.entropy_vs_iterations"):
            call_student(student, lambda: squash(s))       # but the student may not call squash itself
    assert routed.poses.shape == (2, 3, 4)


def test_every_code_is_put_back_and_the_grading_around_the_call_runs():
    functions = package_functions()
    before = [fn.__code__ for fn in functions]
    with pytest.raises(ZeroDivisionError):
        with denied(get_task("01.squash")):
            assert functions[0].__code__ is not before[0]
            1 / 0
    assert all(fn.__code__ is code for fn, code in zip(functions, before))

    def squash(s, dim=-1):
        n2 = (s * s).sum(dim=dim, keepdim=True)
        return n2 / (1 + n2) * s / torch.sqrt(n2 + 1e-16)

    assert check("01.squash", squash, verbose=False).passed   # comparing and gradients run under the gates
    assert all(fn.__code__ is code for fn, code in zip(functions, before))


def test_a_package_function_handed_in_as_the_students_is_refused():
    from capsule_lab.grading.tasks.ch02 import _squash

    result = check("01.squash", lambda s, dim=-1: _squash(s), verbose=False)
    assert not result.passed and "capsule_lab.grading.tasks.ch02._squash" in result.message
    result = check("02.couplings", capsule_lab.routing.closed_form_couplings, verbose=False)
    assert result.points == 0 and "closed_form_couplings is not available while task 02.couplings" in result.message


def test_an_allow_list_names_objects_of_the_package():
    with pytest.raises(ValueError, match="not a qualified name"):
        resolve_allowed(["torch.softmax"])
    with pytest.raises(ValueError, match="does not exist"):
        resolve_allowed(["capsule_lab.routing.no_such_router"])
    for task_id in task_ids():   # every registered allow-list resolves
        assert len(resolve_allowed(get_task(task_id).allowed)) >= len(get_task(task_id).allowed)


BORROWED_FRAME_SQUASH = '''import operator
import capsule_lab.grading.engine.running as _running
from capsule_lab.grading.tasks.ch01 import _stand_in_squash
_running.call_student = operator.call   # the grader's call site rebound: no frame of the student's in between
squash = _stand_in_squash
'''


@pytest.mark.notebook
@pytest.mark.xdist_group("grading-deny-01")
def test_the_grader_s_own_frames_grant_nothing_to_what_the_student_rebinds(tmp_path):
    """The issue's "grader's own frame, replaced": the notebook rebinds the module global through which the grader
    calls the student's function to a frameless callable, and hands in the course's stand-in as its squash. Before
    the fix the stand-in's caller was the grader's frame, so it ran, and the task passed."""
    nb = master("01_capsules.ipynb")
    replace_function(nb, "squash", BORROWED_FRAME_SQUASH)
    path = tmp_path / "01_capsules.ipynb"
    nbformat.write(nb, path)
    report = grade_notebook(path, timeout=120, sandbox=False)   # the gate's own work (the sandbox changes nothing)
    squash = report["tasks"]["01.squash"]
    assert squash["status"] == "refused" and squash["points"] == 0, squash
    assert "capsule_lab.grading.tasks.ch01._stand_in_squash" in squash["message"], squash["message"]
    for honest in ("01.margin_loss", "01.primary_capsules", "01.equal_length"):
        assert report["tasks"][honest]["status"] == "passed", report["tasks"][honest]


OTHER_CHAPTERS_SQUASH = '''def squash(s, dim=-1):
    """Exercise 02's helper of the grading package computes Sabour's squash along the last dimension."""
    from capsule_lab.grading.tasks.ch02 import _squash
    return _squash(s.movedim(dim, -1)).movedim(-1, dim)
'''


@pytest.mark.notebook
@pytest.mark.xdist_group("grading-deny-01")
def test_the_grader_refuses_another_chapters_function(tmp_path):
    nb = master("01_capsules.ipynb")
    replace_function(nb, "squash", OTHER_CHAPTERS_SQUASH)
    path = tmp_path / "01_capsules.ipynb"
    nbformat.write(nb, path)
    report = grade_notebook(path, timeout=120)
    assert report["grading_error"] is None, report["grading_error"]
    squash = report["tasks"]["01.squash"]
    assert squash["status"] == "refused" and squash["points"] == 0, squash
    assert "capsule_lab.grading.tasks.ch02._squash" in squash["message"] and "task 01.squash" in squash["message"]
    # the honest tasks keep their points
    assert report["tasks"]["01.margin_loss"]["status"] == "passed"
    assert report["tasks"]["01.primary_capsules"]["status"] == "passed"
    # the experiment calls that squash: graded on its own, with the course's stand-in in its place, it passes
    assert report["tasks"]["01.steps_to_long"]["passed"]
    assert report["tasks"]["01.steps_to_long"]["stand_ins"] == ["01.squash"]
    # while the definitions load, the notebook's own calls of that squash are refused too; its setup cell is not
    errors = [e["error"] for e in report["definition_errors"]]
    assert any("tasks.ch02._squash is not available while this notebook's definitions" in e for e in errors)
    assert all("tasks.ch02._squash is not available" in e or e.startswith("NameError") for e in errors), errors


def test_each_task_statement_names_what_the_task_allows():
    """The exercise says what of the package a task may call, and says exactly what the registry allows."""
    import json
    import re
    from pathlib import Path

    from capsule_lab.grading import TASKS, tasks_for_chapter

    root = Path(__file__).resolve().parents[1]
    for chapter in sorted({t.chapter for t in TASKS.values()}):
        (path,) = (root / "solutions").glob(f"{chapter}_*.ipynb")
        text = "".join("".join(c["source"]) for c in json.loads(path.read_text(encoding="utf8"))["cells"]
                       if c["cell_type"] == "markdown")
        stated = re.findall(r"What of the package it may call:\*\* (.*?)(?:\.\s|\n\n|$)", text, flags=re.S)
        said = sorted(("nothing",) if s.startswith("nothing") else
                      tuple(sorted(re.findall(r"`(capsule_lab\.[\w.]+)`", s.split("; while")[0]))) for s in stated)
        allowed = sorted(tuple(sorted(t.allowed)) or ("nothing",) for t in tasks_for_chapter(chapter))
        assert said == allowed, (path.name, said, allowed)      # one statement per task (in the notebook's order)
