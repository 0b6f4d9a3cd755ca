"""The graded labs (tutorials/labs/source, nbgrader): the release holds no solution and no hidden
test; autograding gives the reference solutions full marks on every autograded cell (their "why"
cells wait for a hand grade) and the unmodified release zero on every graded cell; a planted wrong
answer for every graded function loses exactly the points of its own test cell; an answer that
calls the reference its hidden test's values came from, or patches it, gets no points; no
exercise names such a reference; each source .ipynb is in sync with its .py."""
import ast
import csv
import json
import re
import shutil
import sys
import zipfile
from pathlib import Path

import jupytext
import nbformat
import pytest

from tutorials import course
from stanza_core.variant import Variant

LABS = course.lab_names()
FORMULA_LABS = [f"lab{i}" for i in range(1, 9)]  # the labs whose answers are functions of numbers
SLOW_TIMEOUT_S = 900  # the first test to use the module's fixture pays for building and grading it

# A plausible wrong answer for every graded function: {lab: {function's grade_id: new body}}.
# Each passes its visible test (a student would not notice) and must fail the hidden ones.
PLANTED = {
    "lab1": {
        "fc_param_share": "return 0.9  # a number read off a figure",
        "ddp_over_stanza_per_sample": "G = b * (N - 1)\n"
                                      "return 2 * (N - 1) * 4 * P / (2 * 4 * A * G + 8 * G + 2 * (N - 2) * 4 * Pc)"
                                      "  # per step: b N samples against b (N - 1)",
        "boundary_bytes_per_step": "with torch.no_grad():\n"
                                   "    a = split_model(get_model(model_name, 1000), input_shape=(3, image_size, image_size))"
                                   ".conv(torch.zeros(1, 3, image_size, image_size)).numel()\n"
                                   "return 4 * b * a + 4 * b, 4 * b * a  # labels taken as int32",
    },
    "lab2": {
        "stanza_bytes_per_step": "return 2 * 4 * A * G + (N - k) * round(2 * (N - k - 1) * 4 * Pc / (N - k)) "
                                 "+ k * round(2 * (k - 1) * 4 * Pf / k)  # labels forgotten",
        "samples_per_fc_worker": "return {j: G // k for j in range(N - k, N)}  # as if each FC worker served as many",
        "loss_scale_error": "return G / nc  # b, not G / b",
    },
    "lab3": {
        "messages_per_step": "nc = N - k\nout = {i: (1, 1) for i in range(nc)}  # the labels' message forgotten\n"
                             "out.update({j: (len(range(j - nc, nc, k)),) * 2 for j in range(nc, N)})\nreturn out",
        "label_bytes_per_step": "return 48  # T2's G = 6, copied",
        "label_share_of_boundary": "return 8 / (4 * A + 8)  # the gradients' way back left out",
    },
    "lab4": {
        "hidden_fraction": "bw = [b for b in bars if b['what'] == 'backward']\n"
                           "ar = [b for b in bars if b['what'] == 'allreduce']\n"
                           "if not bw or not ar:\n    return 0.0\n"
                           "return sum(bw[0]['start'] <= b['start'] < bw[0]['end'] for b in ar) / len(ar)  # bars, not time",
        "pipeline_order": "fc = next(r for r in metrics['ranks'] if r['role'] == 'fc_worker')\n"
                          "return [e['peer'] for e in sorted(fc['timeline'], key=lambda e: e['t'])"
                          " if e['event'] == 'forward_start']  # every step's",
        "bucket_count": "return 1  # right only when one bucket holds everything",
    },
    "lab5": {
        "bandwidth_for_allreduce": "return 2 * (n - 1) / n * nbytes / seconds * 8 / 1e9  # latency left out",
        "best_stanza_k": "return 1  # the paper's k",
        "ps_over_stanza_limit": "return P / Pc  # right only when b (A + 1) << Pc",
    },
    "lab6": {
        "merge_bn_stats": "n = sum(c for c, _, _ in parts)\nmean = sum(t for _, t, _ in parts) / n\n"
                          "return mean, sum(c * (q / c - (t / c) ** 2) for c, t, q in parts) / n"
                          "  # the spread of the workers' means left out",
        "bn_stats_bytes": "return 2 * 4 * 4 * channels if n > 1 else 0  # the ring's (n - 1) / n left out",
        "first_parted_step": "return next((t for t, d in enumerate(rel_diff) if d > 1e-6), None)  # tol ignored",
    },
    "lab7": {
        "deadlocks": "if not any(program):\n    return False\n"
                     "return not any(ops and ops[0][0] == 'send' and program[ops[0][1]][:1] == [('recv', a)]"
                     " for a, ops in enumerate(program))  # each rank's first operation only",
        "bsp_waits": "return [max(compute_s) - c for c in compute_s]  # the allreduce itself left out",
        "straggler_loss": "slowest = max(compute_s)\nreturn sum(slowest - c for c in compute_s) / sum(compute_s)"
                          "  # over the busy time",
    },
    "lab8": {
        "fixed_and_per_sample": "c = (t2 - t1) / abs(b2 - b1)  # the order of the points assumed\nreturn t1 - b1 * c, c",
        "launch_bound_batch": "return round(t0 / c)",
        "exposed_after_backward": "return max(0.0, ready_s[-1] + sum(comm_s) - backward_s)  # every bucket after the last",
    },
}

# Answers that get the right values from the reference the grade's values came from (called
# directly or through an alias), or that patch that reference to agree with a wrong answer.
CHEATS = {
    "lab1": {
        "fc_param_share": "from stanza_core.perf import named_profile as _np\n"
                          "return _np(model_name, image_size=image_size).fc_param_share()",
        "ddp_over_stanza_per_sample": "perf.totals = lambda rows: {'bytes_per_step': 1}  # patches the reference\n"
                                      "return P / Pc",
        "boundary_bytes_per_step": "row = perf.expected_bytes(perf.named_profile(model_name, image_size=image_size, "
                                   "batch_size=b), Variant('stanza', fc_workers=1), 2, global_batch=b)[0]\n"
                                   "return row['sent']['activations'] + row['sent']['labels'], "
                                   "row['recv']['activation_grads']",
    },
    "lab2": {"stanza_bytes_per_step": "return perf.totals(perf.expected_bytes(perf.ModelCounts(Pc, Pf, A), "
                                      "Variant('stanza', fc_workers=k), N, global_batch=G))['bytes_per_step']"},
    "lab3": {"label_bytes_per_step": "rows = perf.expected_bytes(perf.ModelCounts(10, 10, 1), Variant('stanza', fc_workers=1), G + 1, "
                                     "global_batch=G)\n"
                                     "return sum(r['sent'].get('labels', 0) for r in rows)"},
    "lab4": {"bucket_count": "from stanza_core.strategies.stanza.engine import GradBuckets as _GB\n"
                             "conv = split_model(get_model(model, num_classes), input_shape=(3, image_size, image_size)).conv\n"
                             "return len(_GB(list(conv.parameters()), None, 'conv', 'g', bucket_mb, "
                             "torch.device('cpu')).buckets)"},
    "lab5": {"best_stanza_k": "return perf.best_assignment(profile, cluster, "
                              "batch_per_worker=batch_per_worker).best_stanza().fc_workers"},
    "lab6": {"bn_stats_bytes": "from stanza_core.perf import traffic as _t\n"
                               "_t.bn_stats_share = lambda channels, n: 0  # patches the reference\nreturn 0"},
}


def _source(lab):
    return nbformat.read(course.SOURCE / lab / f"{lab}.ipynb", as_version=4)


def _grade_id(cell):
    return cell.metadata.get("nbgrader", {}).get("grade_id")


def _graded_code(nb):
    return [c for c in nb.cells if c.cell_type == "code" and c.metadata["nbgrader"].get("grade")]


def _hidden(cell):
    return cell.source.split("### BEGIN HIDDEN TESTS")[1].split("### END HIDDEN TESTS")[0]


def _forbidden(nb) -> set[str]:
    """The dotted names in the `forbid = [...]` lists of a notebook's hidden tests."""
    names = set()
    for c in _graded_code(nb):
        for node in ast.walk(ast.parse(_hidden(c))):
            if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["forbid"]:
                names |= {ast.unparse(e) for e in node.value.elts}
    return names


def test_there_is_a_lab_per_tutorial():
    assert set(FORMULA_LABS) <= set(LABS) and set(PLANTED) == set(FORMULA_LABS)


@pytest.mark.parametrize("lab", LABS)
def test_source_pair_in_sync_and_cells_marked(lab):
    nb = _source(lab)
    nbformat.validate(nb)
    text = jupytext.read(course.SOURCE / lab / f"{lab}.py")
    assert [(c.cell_type, c.source) for c in nb.cells] == [(c.cell_type, c.source) for c in text.cells]
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")
    ids = [_grade_id(c) for c in nb.cells]
    assert None not in ids and len(set(ids)) == len(ids), "every cell has a unique nbgrader grade_id"
    tests = _graded_code(nb)
    solutions = [c for c in nb.cells if c.metadata["nbgrader"].get("solution") and c.cell_type == "code"]
    assert len(tests) == len(solutions) >= 3
    for c in solutions:
        assert "### BEGIN SOLUTION" in c.source and "### END SOLUTION" in c.source
    for c in tests:  # graded at inputs the student does not see
        assert c.metadata["nbgrader"]["points"] > 0 and "### BEGIN HIDDEN TESTS" in c.source
    why = [c for c in nb.cells if c.cell_type == "markdown" and c.metadata["nbgrader"].get("grade")]
    assert why and set(map(_grade_id, why)) == course.manual_cells(lab), "a 'why' cell graded by hand"
    for c in why:  # nbgrader's manually graded answer: model answer and rubric in the solution region
        meta = c.metadata["nbgrader"]
        assert meta["solution"] and not meta["locked"] and meta["points"] > 0
        region = c.source.split("### BEGIN SOLUTION")[1].split("### END SOLUTION")[0]
        assert "**Model answer.**" in region and "**Rubric.**" in region


@pytest.mark.parametrize("lab", FORMULA_LABS)
def test_every_formula_lab_draws_hidden_inputs_from_the_term(lab):
    # course.freeze seeds __term__ from the term's secret: a lab without it has the same hidden
    # inputs every term, so a leaked feedback file or last year's answers would carry over
    hidden = [c.source.split("### BEGIN HIDDEN TESTS")[1] for c in _graded_code(_source(lab))]
    assert any("__term__" in h for h in hidden), f"{lab}: no hidden test draws from __term__"


@pytest.mark.parametrize("lab", LABS)
def test_every_graded_function_is_named_in_its_exercise_text(lab):
    cells = _source(lab).cells
    for i, c in enumerate(cells):
        if not c.metadata["nbgrader"].get("solution") or c.cell_type != "code":
            continue
        text = next(cells[j].source for j in range(i - 1, -1, -1) if cells[j].cell_type == "markdown")
        defined = [n.name for n in ast.parse(c.source).body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
        assert defined, f"{lab}: solution cell {_grade_id(c)} defines no function"
        for name in defined:
            assert f"`{name}(" in text, f"{lab}: {name} is not named in its exercise's text"
        test = cells[i + 1]
        assert test.metadata["nbgrader"].get("grade") and re.search(rf"\b{defined[0]}\b", test.source)  # called or handed over


@pytest.mark.parametrize("lab", FORMULA_LABS)
def test_no_exercise_names_the_reference_it_is_graded_against(lab):
    """What a student sees (text, setup, visible tests) names none of the references a hidden test
    took its values from; the hidden tests compare with frozen values and guard every call that
    such a reference could answer."""
    nb = _source(lab)
    graded_fns = {_grade_id(c) for c in nb.cells if c.cell_type == "code" and c.metadata["nbgrader"].get("solution")}
    seen = "\n".join(re.sub(r"### BEGIN SOLUTION.*?### END SOLUTION", "", c.source.split("### BEGIN HIDDEN TESTS")[0],
                            flags=re.S) for c in nb.cells)
    for dotted in _forbidden(nb):
        last = dotted.rsplit(".", 1)[-1]
        if last in graded_fns:  # the student's own function has this name: the reference's qualified name
            assert dotted.split(".", 1)[-1] not in seen and f".{last}(" not in seen, (lab, dotted)
        else:
            named = rf"(\.{last}\b|\b{last}\s*\(|`{last}\b|import [^\n]*\b{last}\b)"  # as code, not a word
            assert not re.search(named, seen), f"{lab}: {dotted} is named where students see it"
    for c in _graded_code(nb):
        hidden = _hidden(c)
        assert "perf." not in hidden or "__frozen__(" in hidden, f"{lab} {_grade_id(c)}: compares with a live reference"
        for name, body in CHEATS.get(lab, {}).items():
            if _grade_id(c) == f"test_{name}" and "__graded__" in body:
                assert "__graded__(" in hidden


def _why(lab):
    return " ".join(next(c.source for c in _source(lab).cells
                         if c.cell_type == "markdown" and c.metadata["nbgrader"].get("grade")).split())


def test_the_numbers_the_model_answers_state_are_the_models():
    """Each number a "why" model answer states, from the engine's counts, the model or the records."""
    import json as _json

    from stanza_core import perf
    from stanza_core.perf.records import RECORDS_DIR

    def per_sample(name, N=8, b=32):  # DDP's bytes per trained sample over Stanza k = 1's
        c = perf.ModelCounts.of(perf.named_profile(name, image_size=224))
        ddp = perf.totals(perf.expected_bytes(c, Variant("ddp"), N, global_batch=b * N))["bytes_per_step"] / (b * N)
        st = perf.totals(perf.expected_bytes(c, Variant("stanza", fc_workers=1), N, global_batch=b * (N - 1)))["bytes_per_step"]
        return ddp / (st / (b * (N - 1)))

    text = _why("lab1")
    assert f"about {per_sample('alexnet'):.0f}x" in text and f"about {per_sample('resnet50'):.1f}x per" in text
    alexnet = perf.named_profile("alexnet", image_size=224)
    assert f"holds {100 * alexnet.fc_param_share():.0f} %" in text and f"A = {alexnet.boundary_values:,}" in text
    assert f"{100 * perf.named_profile('resnet50', image_size=224).fc_param_share():.0f} % of its" in text

    text = _why("lab5")
    vgg = perf.ModelCounts.of(perf.named_profile("vgg16", image_size=224))
    P, Pc, A = vgg.params, vgg.conv_params, vgg.boundary_values

    def ps_over_stanza(N, b):
        ps = perf.totals(perf.expected_bytes(vgg, Variant("ps"), N, global_batch=b * N))["bytes_per_step"]
        return ps / perf.totals(perf.expected_bytes(vgg, Variant("stanza", fc_workers=1), N, global_batch=b * (N - 1)))["bytes_per_step"]

    ratios = ", ".join(f"{ps_over_stanza(N, 32):.1f} at N = {N}" for N in (4, 8, 16))
    assert f"about {ratios}, limit {P / (Pc + 32 * (A + 1)):.2f}" in text
    assert f"{P / (Pc + A + 1):.2f} against P / P_c = {P / Pc:.2f}" in text

    text = _why("lab8")
    fits = {}
    for model in ("alexnet", "vgg16"):
        t1, t2 = (_json.loads((RECORDS_DIR / "h200" / f"{model}-b{b}-tf32.json").read_text())["plain_fwd_bwd_s"]
                  for b in (64, 128))
        c = (t2 - t1) / 64
        fits[model] = (t1 - 64 * c, c)
    (a0, ac), (v0, vc) = fits["alexnet"], fits["vgg16"]
    assert f"about {a0 * 1e3:.0f} ms and VGG-16 about {v0 * 1e3:.0f} ms" in text
    assert f"batch of about {a0 / ac:.0f}" in text and f"below about {v0 / vc:.0f}" in text
    assert f"about {ac * 1e6:.0f} µs per sample" in text and f"about {vc * 1e3:.2f} ms per sample" in text
    assert f"as large as {a0 / ac:.0f} samples" in text and f"fixed share is about {100 * a0 / (a0 + 32 * ac):.0f} %" in text
    assert a0 / ac < 32 and v0 / vc < 32  # neither launch-bound at batch 32


def test_freeze_writes_literals_drawn_from_the_term_secret():
    def notebook():
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell("import math", metadata={"nbgrader": {"grade_id": "setup"}}),
                    nbformat.v4.new_code_cell(
                        "### BEGIN HIDDEN TESTS\ncases = __frozen__(__term__.sample(range(1000), 3))\n"
                        "want = __frozen__([math.sqrt(n) for n in cases])\nok = __graded__(f, [], 2)\n"
                        "### END HIDDEN TESTS\n", metadata={"nbgrader": {"grade_id": "t", "grade": True}})]
        return nb
    terms = []
    for secret in ("autumn", "autumn", "spring"):
        nb = notebook()
        literals = course.freeze(nb, secret, "lab0")
        src = nb.cells[1].source
        cases = ast.literal_eval(literals[0])
        assert len(literals) == 2 and "__frozen__" not in src and "__term__" not in src
        assert f"want = {[n ** 0.5 for n in cases]!r}" in src and "__graded__(f, [], 2)" in src
        terms.append(cases)
    assert terms[0] == terms[1] != terms[2]  # the same term draws the same inputs, another term others


def test_a_poisoned_reference_raises_through_aliases_caches_classes_and_threads():
    import functools
    import threading
    import types

    from tutorials import answers
    mod = types.ModuleType("poison_probe")
    exec("import functools\n"
         "def reference(x):\n    return x * x\n"
         "cached = functools.lru_cache(reference)\n"
         "def outer():\n    k = 2\n    def closure(x):\n        return k * x\n    return closure\n"
         "closure = outer()\n"
         "class Reference:\n    def __init__(self, x):\n        self.value = x * x\n", mod.__dict__)
    import sys
    sys.modules["poison_probe"] = mod
    try:
        alias = mod.reference
        assert mod.cached(3) == 9  # in the cache before the answer runs
        undo = [answers._poison(f"poison_probe.{n}") for n in ("reference", "cached", "closure", "Reference")]
        out = []
        thread = threading.Thread(target=lambda: out.append(_raises(alias, 3)))
        thread.start()
        thread.join()
        assert out == ["PermissionError"]
        assert [_raises(f, 3) for f in (alias, mod.cached, mod.closure, mod.Reference)] == ["PermissionError"] * 4
        for u in reversed(undo):
            u()
        assert (alias(3), mod.closure(3), mod.Reference(3).value) == (9, 6, 9)
    finally:
        del sys.modules["poison_probe"]


def _raises(f, *args):
    try:
        f(*args)
    except Exception as e:  # noqa: BLE001
        return type(e).__name__
    return None


def _plant(nb, grade_id, body):
    cell = next(c for c in nb.cells if _grade_id(c) == grade_id)
    if body.startswith("### CELL\n"):  # the whole cell (battery.CELL)
        cell.source = body.removeprefix("### CELL\n")
        return
    indented = "\n".join("    " + ln for ln in body.split("\n"))
    new, n = re.subn(r"### BEGIN SOLUTION\n.*?### END SOLUTION", lambda m: "### BEGIN SOLUTION\n" + indented
                     + "\n    ### END SOLUTION", cell.source, flags=re.S)
    assert n == 1
    cell.source = new


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Build the release of the formula labs and grade, in one run, the self-check's students
    (reference, release), planted (every graded function wrong), cheat (answers that call or patch
    the references) and the battery (tests/tutorials/battery.py: cheating students, broken
    notebooks, honest alternatives). (The coding labs' battery is test_grading_battery.py's.)"""
    pytest.importorskip("nbgrader")
    from tutorials import autograde, sandbox
    if why := sandbox.available():  # Linux without the jail is a machine the course cannot grade on
        (pytest.skip if sys.platform != "linux" else pytest.fail)(why)
    import os

    import battery
    os.environ["PATH"] = os.pathsep.join((str(Path(sys.executable).parent), os.environ.get("PATH", "")))
    root = tmp_path_factory.mktemp("course")
    out = root / "course"
    course.build_release(out, FORMULA_LABS)
    subs = course.self_check_submissions(out, FORMULA_LABS)
    students = {"planted": PLANTED, "cheat": CHEATS, **battery.formula_students(out)}
    for student, answers in students.items():
        for lab, bodies in answers.items():
            nb = nbformat.read(out / "source" / lab / f"{lab}.ipynb", as_version=4)
            for grade_id, body in bodies.items():
                _plant(nb, grade_id, body)
            (subs / student / lab).mkdir(parents=True)
            nbformat.write(nb, subs / student / lab / f"{lab}.ipynb")
    battery.broken_notebooks(out, subs)
    saved = autograde.CALL_S
    autograde.CALL_S = battery.CALL_S  # the hanging student costs this, not a minute
    try:
        grades = course.autograde(None, out, subs, FORMULA_LABS)
    finally:
        autograde.CALL_S = saved
    return out, grades, root


@pytest.mark.slow
@pytest.mark.timeout(SLOW_TIMEOUT_S)
def test_release_has_no_solution_and_no_hidden_test(graded):
    out, _, _ = graded
    for lab in FORMULA_LABS:
        text = (out / "release" / lab / f"{lab}.ipynb").read_text()
        assert not [w for w in course.LEAKS if w in text]
        source = _source(lab)
        solutions = sum(bool(c.metadata["nbgrader"].get("solution")) for c in source.cells if c.cell_type == "code")
        release = nbformat.read(out / "release" / lab / f"{lab}.ipynb", as_version=4)
        code = "\n".join(c.source for c in release.cells if c.cell_type == "code")
        assert code.count("raise NotImplementedError()") == solutions
        for c in _graded_code(nbformat.read(out / "source" / lab / f"{lab}.ipynb", as_version=4)):
            hidden = _hidden(c)  # the hidden tests, frozen values included, are nowhere in the release
            assert hidden.strip() and hidden.strip() not in text
        for c in source.cells:  # nor the model answers and rubrics of the "why" cells
            if c.cell_type == "markdown" and c.metadata["nbgrader"].get("grade"):
                assert "**Rubric.**" not in text and c.source.split("### BEGIN SOLUTION")[1][:200] not in text


@pytest.mark.slow
@pytest.mark.timeout(SLOW_TIMEOUT_S)
def test_reference_full_marks_release_zero_on_every_cell(graded):
    _, grades, _ = graded
    assert set(grades["reference"]) == set(grades["release"]) == set(FORMULA_LABS)
    manual = {lab: course.manual_cells(lab) for lab in FORMULA_LABS}
    assert course.self_check_problems({k: grades[k] for k in ("reference", "release")}, manual) == []
    for lab in FORMULA_LABS:
        assert len(grades["release"][lab]) >= 3
        assert all(m > 0 for _, m, _ in grades["reference"][lab].values())
        for cell in manual[lab]:  # the "why" answers wait for a hand grade; the empty ones do not
            assert grades["reference"][lab][cell][2] is True and grades["release"][lab][cell][2] is False
    # the check can fail: a reference that misses one autograded point, or a release that earns one
    lab = FORMULA_LABS[0]
    cell = next(c for c in grades["reference"][lab] if c.startswith("test_"))
    bad = json.loads(json.dumps({k: grades[k] for k in ("reference", "release")}))
    bad["reference"][lab][cell][0] -= 1
    bad["release"][lab][cell][0] = 1
    assert len(course.self_check_problems(bad, manual)) == 2


@pytest.mark.slow
@pytest.mark.timeout(SLOW_TIMEOUT_S)
def test_a_planted_wrong_answer_loses_exactly_its_cells_points(graded):
    _, grades, _ = graded
    for lab, bodies in PLANTED.items():
        cells = grades["planted"][lab]
        lost = {c: m - s for c, (s, m, pending) in cells.items() if s != m and not pending}
        assert lost == {f"test_{g}": cells[f"test_{g}"][1] for g in bodies}, (lab, cells)


@pytest.mark.slow
@pytest.mark.timeout(SLOW_TIMEOUT_S)
def test_an_answer_that_calls_or_patches_its_reference_gets_no_points(graded):
    out, grades, _ = graded
    for lab, bodies in CHEATS.items():
        cells = grades["cheat"][lab]
        zero = {c for c, (s, m, pending) in cells.items() if s == 0 and not pending}
        full = {c for c, (s, m, pending) in cells.items() if s == m and not pending}
        assert zero == {f"test_{g}" for g in bodies}, (lab, cells)
        assert zero | full == {c for c, (_, _, pending) in cells.items() if not pending}
        graded_nb = nbformat.read(out / "autograded" / "cheat" / lab / f"{lab}.ipynb", as_version=4)
        for name, body in bodies.items():  # lost to the poisoned reference (a call) or the frozen values (a patch)
            outputs = next(c for c in graded_nb.cells if _grade_id(c) == f"test_{name}").outputs
            assert len(outputs) == 1 and outputs[0].output_type == "error", (lab, name, outputs)
            called = "patches the reference" not in body
            assert ("a reference this answer is graded against" in outputs[0].evalue) == called, outputs[0].evalue
            assert called or outputs[0].evalue == "a hidden test failed: a wrong value", outputs[0].evalue


@pytest.mark.slow
@pytest.mark.timeout(SLOW_TIMEOUT_S)
def test_the_cheating_battery_earns_none_of_its_targets_and_honest_answers_full_marks(graded):
    import sqlite3

    import battery
    out, grades, _ = graded
    for student, labs in battery.targets(battery.formula_students(out)).items():
        for lab, target in labs.items():
            auto = {c: (s, m) for c, (s, m, pending) in grades[student][lab].items() if c.startswith("test_")}
            assert {c for c, (s, m) in auto.items() if s == 0} == target, (student, lab, auto)
            assert all(s == m > 0 for c, (s, m) in auto.items() if c not in target), (student, lab, auto)
    reference = grades["reference"]["lab7"]
    corrupt = grades["corrupt"]["lab7"]  # a notebook that is not JSON: 0, one line, and the others graded
    assert set(corrupt) == set(reference) and all(s == 0 for s, _, _ in corrupt.values())
    assert grades["regraded"]["lab7"] == reference  # a solution cell made a 100-point grade cell changes nothing
    nb = nbformat.read(out / "autograded" / "corrupt" / "lab7" / "lab7.ipynb", as_version=4)
    why = {o.evalue for c in _graded_code(nb) for o in c.outputs}
    assert len(why) == 1 and next(iter(why)).startswith("the notebook could not be read") and "\n" not in str(why)
    for student, cell, reason in (("exits", "test_deadlocks", "exit status 3"), ("hangs", "test_straggler_loss", "timed out"),
                                  ("garbage", "test_bsp_waits", "not a plain JSON value")):
        nb = nbformat.read(out / "autograded" / student / "lab7" / "lab7.ipynb", as_version=4)
        outputs = next(c for c in nb.cells if _grade_id(c) == cell).outputs
        assert reason in outputs[0].evalue and "\n" not in outputs[0].evalue, (student, outputs)
    with sqlite3.connect(out / "gradebook.db") as db:  # the gradebook the "gradebook" student wrote to
        assert db.execute("select count(*) from grade where extra_credit > 0").fetchone() == (0,)
    assert not (out / "gradebook.db-journal").exists()


@pytest.mark.slow
@pytest.mark.timeout(SLOW_TIMEOUT_S)
def test_feedback_holds_no_hidden_test_and_no_frozen_value(graded):
    out, _, _ = graded
    students = ["reference", "cheat", "planted", "reads_notebook", "logs_inputs", "unpoisons", "hangs", "garbage"]
    html = {p: p.read_text() for p in course.feedback(out, FORMULA_LABS, students)}
    assert len(html) == len(course._pairs(out, "autograded", FORMULA_LABS, students)) > 2 * len(FORMULA_LABS)
    logged = out / "autograded" / "logs_inputs" / "lab1" / "lab1.ipynb"  # it did raise what it logged
    why = next(c for c in nbformat.read(logged, as_version=4).cells if _grade_id(c) == "test_boundary_bytes_per_step")
    assert why.outputs[0].evalue.startswith("RuntimeError raised in your code (cell boundary_bytes_per_step, line ")
    for path, text in html.items():
        lab = path.parent.name
        release = (out / "release" / lab / f"{lab}.ipynb").read_text()
        assert "LEAK seen=[" not in text, path  # what it raised (its own source, shown, holds "LEAK seen={")
        for literal in json.loads((out / "frozen" / f"{lab}.json").read_text()):  # every hidden call's inputs
            value = ast.literal_eval(literal)
            for case in value if isinstance(value, (list, tuple)) else ():
                for shown in {repr(case), repr(case)[1:-1]} if isinstance(case, tuple) else ():
                    assert len(shown) < 8 or shown in release or shown not in text, (path, shown)
        # (solution markers may be the student's own: these students submitted the instructor's cells)
        assert not [w for w in ("HIDDEN TESTS", "__frozen__", "__graded__", "forbid") if w in text], path
        literals = json.loads((out / "frozen" / f"{lab}.json").read_text())
        assert literals, lab
        for literal in literals:
            assert literal not in text, (path, literal[:80])
            for token in re.findall(r"\d+\.\d{5,}(?:e-?\d+)?|\d{7,}", literal):
                assert token in release or token not in text, (path, token)
        for c in nbformat.read(out / "source" / lab / f"{lab}.ipynb", as_version=4).cells:
            if c.cell_type == "code" and c.metadata["nbgrader"].get("grade"):
                for line in _hidden(c).splitlines():
                    assert len(line.strip()) < 30 or line.strip() not in text, (path, line)


@pytest.mark.slow
@pytest.mark.timeout(SLOW_TIMEOUT_S)
def test_the_student_bundle_holds_no_solution(graded, tmp_path):
    out, _, _ = graded
    to = course.bundle(out, tmp_path / "students.zip")
    with zipfile.ZipFile(to) as z:
        names = set(z.namelist())
        blob = b"\n".join(z.read(n) for n in names)
    assert {f"stanza-labs/{lab}/{lab}.ipynb" for lab in FORMULA_LABS} | {"stanza-labs/README.md"} <= names
    assert not [w for w in course.LEAKS if w.encode() in blob]
    for lab in FORMULA_LABS:  # no line of any solution region or hidden test, frozen values included
        for c in nbformat.read(out / "source" / lab / f"{lab}.ipynb", as_version=4).cells:
            for region in re.findall(r"BEGIN (?:SOLUTION|HIDDEN TESTS)\n(.*?)### END", c.source, flags=re.S):
                for line in region.splitlines():
                    line = line.strip().lstrip("# ").strip()
                    if len(line) > 24:
                        assert json.dumps(line, ensure_ascii=False)[1:-1].encode() not in blob, (lab, line)
    with pytest.raises(ValueError, match="exists"):
        course.bundle(out, to)  # never overwrites


@pytest.mark.slow
@pytest.mark.timeout(SLOW_TIMEOUT_S)
def test_the_students_repository_holds_the_workbench_and_no_solution(graded, tmp_path):
    """The repository students clone: the workbench, the tutorials, the releases; not the kit
    (tutorials/labs/source), not the grader, no line of a solution or a hidden test."""
    import subprocess

    import battery
    out, _, _ = graded
    repo = course.student_repo(out, tmp_path / "students")
    files = {str(p.relative_to(repo)): p.read_bytes() for p in repo.rglob("*") if p.is_file() and ".git" not in p.parts}
    assert {f"tutorials/labs/{lab}/{lab}.ipynb" for lab in FORMULA_LABS} | {
        "README.md", "pyproject.toml", "stanza_core/__init__.py", "tutorials/gradekit.py", "tutorials/t1_anatomy.ipynb"} <= set(files)
    assert not [n for n in files if n.startswith("tutorials/labs/source") or n.startswith("tests/")]
    assert not [n for n in files if n.startswith("tutorials/") and n.count("/") == 1
                and n.split("/")[1] in course.GRADER_ONLY]
    assert not [w for w in course.LEAKS for data in files.values() if w.encode() in data]
    assert battery.solution_lines_in(files, out, FORMULA_LABS) == []
    assert "pip install -e ." in files["README.md"].decode() and "tutorials/labs/<lab>" in files["README.md"].decode()
    if (repo / ".git").is_dir():  # a repository to clone, its one commit holding every file
        listed = subprocess.run(["git", "-C", str(repo), "ls-files"], capture_output=True, text=True, check=True)
        assert set(listed.stdout.split()) == set(files)
    with pytest.raises(ValueError, match="exists"):
        course.student_repo(out, repo)


@pytest.mark.slow
@pytest.mark.timeout(SLOW_TIMEOUT_S)
@pytest.mark.filterwarnings("ignore:.*not in session")  # nbgrader 0.9's gradebook under SQLAlchemy 2
def test_a_term_keeps_its_gradebook_hand_grades_and_every_submission(graded, tmp_path):
    """release, collect, autograde, feedback, export on lab 7 (the quickest to grade), in a term
    folder made from the module's release: nothing a user saved is lost or overwritten."""
    import os

    from nbgrader.api import Gradebook
    out, _, _ = graded
    term = course.open_course(tmp_path / "term", create=True)
    for part in ("source", "release"):
        shutil.copytree(out / part / "lab7", term / part / "lab7")
    shutil.copy(out / course.SECRET, term / course.SECRET)
    shutil.copy(out / "gradebook.db", term / "gradebook.db")
    (term / course.TERM_CONFIG).write_text('{"due": {"lab7": "2026-10-05 23:59 UTC"}}')  # 10 % a started day late
    due = 1_791_244_740  # 2026-10-05 23:59:00 UTC
    assert course.release(term, ["lab7"]) == []  # released already: kept as it is
    inbox = tmp_path / "inbox"
    (inbox / "alice" / "lab7").mkdir(parents=True)
    (inbox / "bob").mkdir()
    reference = nbformat.read(out / "source" / "lab7" / "lab7.ipynb", as_version=4)
    nbformat.write(reference, inbox / "alice" / "lab7" / "lab7.ipynb")
    shutil.copy(out / "release" / "lab7" / "lab7.ipynb", inbox / "bob" / "lab7.ipynb")
    for nb in (inbox / "alice" / "lab7" / "lab7.ipynb", inbox / "bob" / "lab7.ipynb"):
        os.utime(nb, (due - 3600, due - 3600))  # handed in an hour early
    assert course.collect(term, inbox, ["lab7"]) == [("alice", "lab7"), ("bob", "lab7")]
    assert course.collect(term, inbox, ["lab7"]) == []  # unchanged
    first = course.term_autograde(term, ["lab7"])
    assert sorted(first) == ["alice", "bob"] and course.term_autograde(term, ["lab7"]) == {}
    with Gradebook(f"sqlite:///{term / 'gradebook.db'}") as gb:  # a hand grade, as the formgrader gives it
        gb.find_grade("why_deadlock_fix", "lab7", "lab7", "alice").manual_score = 1.5
        gb.db.commit()
    _plant(reference, "bsp_waits", PLANTED["lab7"]["bsp_waits"])  # alice resubmits, worse
    nbformat.write(reference, inbox / "alice" / "lab7" / "lab7.ipynb")
    os.utime(inbox / "alice" / "lab7" / "lab7.ipynb", (due + 36 * 3600, due + 36 * 3600))  # a day and a half late
    assert course.collect(term, inbox, ["lab7"]) == [("alice", "lab7")]
    kept = list((term / "backup").glob("*/submitted/alice/lab7/lab7.ipynb"))
    assert len(kept) == 1
    was = nbformat.read(kept[0], as_version=4)
    assert "slowest = max(compute_s)\n" in next(c.source for c in was.cells if _grade_id(c) == "bsp_waits")
    again = course.term_autograde(term, ["lab7"])
    assert list(again) == ["alice"] and again["alice"]["lab7"]["test_bsp_waits"][0] == 0
    assert again["alice"]["lab7"]["why_deadlock_fix"][0] == 1.5  # the hand grade stayed
    assert list((term / "backup").glob("*/gradebook.db")) and list((term / "backup").glob("*/autograded/alice/lab7"))
    assert [p.name for p in course.feedback(term, ["lab7"])] == ["lab7.html", "lab7.html"]
    assert all((term / "feedback" / s / "lab7" / "lab7.html").is_file() for s in ("alice", "bob"))
    csv_path, json_path = course.export(term)
    rows = {r["student_id"]: r for r in csv.DictReader(csv_path.open()) if r["assignment"] == "lab7"}
    alice = json.loads(json_path.read_text())["alice"]["lab7"]
    raw = sum(s for s, _, _ in alice.values())
    assert float(rows["alice"]["raw_score"]) == raw == sum(
        m for c, (_, m, _) in alice.items() if c.startswith("test_") and c != "test_bsp_waits") + 1.5
    # late work: the due date from the term's config, the student's own time, two started days late: 20 %
    assert rows["alice"]["duedate"] == rows["bob"]["duedate"] == "2026-10-05 23:59:00"
    assert rows["alice"]["timestamp"] == "2026-10-07 11:59:00" and rows["bob"]["timestamp"] == "2026-10-05 22:59:00"
    assert float(rows["alice"]["late_submission_penalty"]) == pytest.approx(0.2 * raw)
    assert float(rows["alice"]["score"]) == pytest.approx(0.8 * raw)
    assert float(rows["bob"]["score"]) == 0 == float(rows["bob"]["late_submission_penalty"])
    with pytest.raises(RuntimeError, match="term"):
        course.build_release(term, ["lab7"])  # the self-check never replaces a term folder
    with pytest.raises(ValueError, match="make clean"):
        course.open_course(course.CLEANED / "my-term", create=True)


def test_make_course_is_one_command():
    text = (course.REPO_ROOT / "Makefile").read_text()
    assert re.search(r"^course: install\n\t\$\(BIN\)/python -m tutorials\.course .*SUBMISSIONS", text, re.M)
