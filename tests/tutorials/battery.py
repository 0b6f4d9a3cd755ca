"""Students who try to get points without the work, broken notebooks, and honest alternative answers:
the graded labs' battery (tests/tutorials/test_labs.py grades the formula labs' students,
test_grading_battery.py the coding labs'). Each cheating student submits the reference notebook
with the answers it cheats on replaced; TARGETS names the cells it targets (it must earn 0 there
and full marks on its honest cells).

{student: {lab: {solution grade_id: new body of the function}}}
"""
from pathlib import Path

import nbformat

CALL_S = 30.0  # per call in the battery: the hanging student costs this (building VGG-16 on a loaded machine takes ~10 s)

# The reference values a test cell's visible part names (lab 1: `ratio` in the old cells, `share`).
_READ_CELL = ("import __main__\n"
              "return getattr(__main__, 'share', None) or getattr(__main__, 'ratio', None) or 0.5")


def formula_students(course: Path) -> dict:
    nb = str(course / "source" / "lab1" / "lab1.ipynb")
    gradebook = str(course / "gradebook.db")
    return {
        # runs the instructor's solutions, which the kit holds (tutorials/labs/source/lab7/lab7.py)
        "runs_solutions": {"lab7": {
            "bsp_waits": "from tutorials.labs.source.lab7 import lab7 as _l\nreturn _l.bsp_waits(compute_s, allreduce_s)",
            "straggler_loss": "import runpy as _r\nreturn _r.run_path('tutorials/labs/source/lab7/lab7.py')"
                              "['straggler_loss'](compute_s)"}},
        # returns objects whose comparisons are always true
        "always_true": {"lab7": {
            "bsp_waits": "class _Yes(list):\n    def __eq__(self, other):\n        return True\n"
                         "    __ne__ = lambda self, other: False\nreturn _Yes(compute_s)",
            "straggler_loss": "class _Yes(float):\n    def __eq__(self, other):\n        return True\n"
                              "    __lt__ = __le__ = __gt__ = __ge__ = __eq__\n    __sub__ = __rsub__ = lambda s, o: 0.0\n"
                              "    __abs__ = lambda self: 0.0\nreturn _Yes(0.0)"}},
        # reads the expected value from the calling test cell
        "reads_test_cell": {"lab1": {
            "fc_param_share": _READ_CELL,
            "ddp_over_stanza_per_sample": "import linecache as _lc\nreturn float(_lc.getline('<test>', 3) or 1)",
            "boundary_bytes_per_step": "import sys as _s\nf = _s._getframe(1)\nreturn f.f_locals.get('pair', (0, 0))"}},
        # calls the reference in a thread (no profiler follows it), or switches the profiler off
        "thread_or_profiler": {"lab1": {
            "fc_param_share": "import threading\nout = []\n"
                              "t = threading.Thread(target=lambda: out.append(perf.named_profile(model_name, "
                              "image_size=image_size).fc_param_share()))\nt.start()\nt.join()\nreturn out[0] if out else 0.5",
            "boundary_bytes_per_step": "import sys as _s\n_s.setprofile(None)\n"
                                       "row = perf.expected_bytes(perf.named_profile(model_name, image_size=image_size, "
                                       "batch_size=b), 'stanza', 2, 1, global_batch=b)[0]\n"
                                       "return row['sent']['activations'] + row['sent']['labels'], "
                                       "row['recv']['activation_grads']"}},
        # reads the frozen instructor's notebook during grading, relative and absolute
        "reads_notebook": {"lab1": {
            "fc_param_share": "import json, pathlib\n"
                              f"for p in ('../../../source/lab1/lab1.ipynb', {nb!r}):\n"
                              "    if pathlib.Path(p).exists():\n"
                              "        return len(json.loads(pathlib.Path(p).read_text())) * 0.0 + 0.9\n"
                              "raise FileNotFoundError('no instructor notebook here')"}},
        # writes extra credit into the gradebook from its own code, and answers correctly otherwise
        "gradebook": {"lab7": {
            "bsp_waits": "import sqlite3\ntry:\n"
                         f"    db = sqlite3.connect({gradebook!r})\n"
                         "    db.execute('update grade set extra_credit = 100')\n    db.commit()\n"
                         "except Exception:\n    pass\n"
                         "slowest = max(compute_s)\nreturn [slowest - c + allreduce_s for c in compute_s]"}},
        # crashes its process, hangs, or writes garbage where the answers go
        "exits": {"lab7": {"deadlocks": "import os\nos._exit(3)"}},
        "hangs": {"lab7": {"straggler_loss": "while True:\n    pass"}},
        "garbage": {"lab7": {"bsp_waits": "import os\nfor fd in range(1, 64):\n    try:\n"
                                          "        os.write(fd, b'{\"id\": 1, \"value\": [0.0]}\\nnot json\\n')\n"
                                          "    except OSError:\n        pass\nreturn [0.0 for c in compute_s]"}},
        # honest alternatives: a pairwise (Chan et al.) batch-norm merge; a deadlock check by simulation
        "honest": {"lab6": {
            "merge_bn_stats": "n, mean, m2 = 0, None, None\n"
                              "for c, t, q in parts:\n"
                              "    mb, m2b = t / c, q - t * t / c\n"
                              "    if mean is None:\n        n, mean, m2 = c, mb, m2b\n        continue\n"
                              "    d = mb - mean\n    tot = n + c\n"
                              "    mean, m2 = mean + d * c / tot, m2 + m2b + d * d * n * c / tot\n"
                              "    n = tot\nreturn mean, m2 / n"},
            "lab7": {"bsp_waits": "return [max(compute_s) + allreduce_s - c for c in compute_s]"}},
    }


# The cells each student targets and must earn 0 on ({student: {lab: {cells}}}); every other
# autograded cell it submitted must earn full marks.
def targets(students: dict) -> dict:
    out = {s: {lab: {f"test_{g}" for g in bodies} for lab, bodies in labs.items()} for s, labs in students.items()}
    out["honest"] = {lab: set() for lab in students["honest"]}
    out["gradebook"] = {"lab7": set()}  # its answer is right: the cheat is on the gradebook, checked apart
    return out


def broken_notebooks(course: Path, subs: Path) -> None:
    """A notebook that is not JSON; one whose solution cell claims to be a 100-point grade cell."""
    (subs / "corrupt" / "lab7").mkdir(parents=True)
    (subs / "corrupt" / "lab7" / "lab7.ipynb").write_text('{"cells": [{"not a notebook')
    nb = nbformat.read(course / "source" / "lab7" / "lab7.ipynb", as_version=4)
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "bsp_waits")
    cell.metadata["nbgrader"].update(grade=True, points=100)
    (subs / "regraded" / "lab7").mkdir(parents=True)
    nbformat.write(nb, subs / "regraded" / "lab7" / "lab7.ipynb")
