"""Students who try to get points without the work, broken notebooks, and honest alternative answers:
the graded labs' battery (tests/tutorials/test_labs.py grades the formula labs' students,
test_grading_battery.py the coding labs'). Each cheating student submits the reference notebook
with the answers it cheats on replaced; TARGETS names the cells it targets (it must earn 0 there
and full marks on its honest cells).

{student: {lab: {solution grade_id: new body of the function}}}; a body that starts with CELL is
the whole new cell (code that runs when the cell runs, before any graded call).
"""
from pathlib import Path

import nbformat

CALL_S = 30.0  # per call in the battery: the hanging student costs this (building VGG-16 on a loaded machine takes ~10 s)

CELL = "### CELL\n"

# Saves the code of the workbench's references when its cell runs (before the grader poisons
# them for a call) and puts it back with setattr inside the answer: the static screen sees names,
# not strings. With `perf.expected_bytes` restored, the answer is the reference's.
_UNPOISON = ("_co = '__co' + 'de__'\n"
             "_fn = lambda f: getattr(f, '__wra' + 'pped__', f)\n"
             "_saved = [(_fn(f), getattr(_fn(f), _co)) for f in (perf.expected_bytes, perf.named_profile, perf.totals,\n"
             "                                                    perf.traffic.rank_bytes, perf.traffic.summary_bytes)]\n\n\n"
             "def _unpoison():\n"
             "    for f, code in _saved:\n"
             "        setattr(f, _co, code)\n\n\n")
# Drops every stanza_core module (vars() of sys, not the blocked name) and imports the package
# afresh: new function objects, never poisoned.
_REIMPORT = ("import sys as _s\n_m = vars(_s)['modu' + 'les']\n"
             "for _n in [n for n in _m if n.startswith('stanza_core')]:\n    del _m[_n]\n"
             "from stanza_core import perf as _fresh\n")

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
                                       "from stanza_core.variant import Variant as _V\n"
                                       "row = perf.expected_bytes(perf.named_profile(model_name, image_size=image_size, "
                                       "batch_size=b), _V('stanza', fc_workers=1), 2, global_batch=b)[0]\n"
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
        # restores the poisoned references' code, or imports the package afresh, and calls them
        "unpoisons": {
            "lab1": {"boundary_bytes_per_step": CELL + _UNPOISON +
                     "def boundary_bytes_per_step(model_name: str, image_size: int, b: int) -> tuple[int, int]:\n"
                     "    _unpoison()\n"
                     "    from stanza_core.variant import Variant\n"
                     "    row = perf.expected_bytes(perf.named_profile(model_name, image_size=image_size, batch_size=b),"
                     " Variant('stanza', fc_workers=1), 2, global_batch=b)[0]\n"
                     "    return row['sent']['activations'] + row['sent']['labels'], row['recv']['activation_grads']\n"},
            "lab2": {"stanza_bytes_per_step": CELL + _UNPOISON +
                     "def stanza_bytes_per_step(Pc: int, Pf: int, A: int, N: int, k: int, G: int) -> int:\n"
                     "    _unpoison()\n"
                     "    from stanza_core.variant import Variant\n"
                     "    return perf.totals(perf.expected_bytes(perf.ModelCounts(Pc, Pf, A), Variant('stanza', fc_workers=k), N,"
                     " global_batch=G))"
                     "['bytes_per_step']\n",
                     "samples_per_fc_worker": _REIMPORT +
                     "from stanza_core.variant import Variant as _V\n"
                     "rows = _fresh.expected_bytes(_fresh.ModelCounts(10, 10, 1), _V('stanza', fc_workers=k), N, global_batch=G)\n"
                     "return {r['rank']: r['recv']['activations'] // 4 for r in rows if r['role'] == 'fc_worker'}"}},
        # logs the arguments of every call (the hidden tests' inputs) and raises them in a later call
        # and a later cell: its feedback must show none of them (test_labs' feedback test greps for them)
        "logs_inputs": {"lab1": {
            "fc_param_share": CELL + "_seen = []\n\n\n"
                              "def fc_param_share(model_name: str, image_size: int = 224) -> float:\n"
                              "    _seen.append((model_name, image_size))\n"
                              "    split = split_model(get_model(model_name, 1000), input_shape=(3, image_size, image_size))\n"
                              "    fc = sum(p.numel() for p in split.fc.parameters())\n"
                              "    return fc / (fc + sum(p.numel() for p in split.conv.parameters()))\n",
            "boundary_bytes_per_step": CELL + "_calls = []\n\n\n"
                                       "def boundary_bytes_per_step(model_name: str, image_size: int, b: int) -> tuple[int, int]:\n"
                                       "    _calls.append((model_name, image_size, b))\n"
                                       "    if len(_calls) > 1:  # the visible call, then the first hidden one\n"
                                       "        raise RuntimeError(f'LEAK seen={_calls + _seen!r}')\n"
                                       "    return 12 * b, 4 * b  # what the visible test accepts\n"}},
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
    out["logs_inputs"] = {"lab1": {"test_boundary_bytes_per_step"}}  # its logging answer is right; the leak is graded apart
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


def solution_lines_in(files: dict, course: Path, labs) -> list:
    """(file, line) for every solution region or hidden test of the course's frozen notebooks that
    one of `files` ({name: bytes}) holds whole, and for every line of one (over 32 characters:
    shorter ones such as `for p in model.parameters():` are any program's; not in the release,
    whose text may name a call; frozen values included) that a file outside the workbench holds (the workbench may share a line of library
    code with an answer)."""
    import json
    import re
    blob = {name: data for name, data in files.items() if not name.startswith("stanza_core/")}
    found = []
    release = b"\n".join((course / "release" / lab / f"{lab}.ipynb").read_bytes() for lab in labs)  # seen anyway
    for lab in labs:
        for c in nbformat.read(course / "source" / lab / f"{lab}.ipynb", as_version=4).cells:
            for region in re.findall(r"BEGIN (?:SOLUTION|HIDDEN TESTS)\n(.*?)### END", c.source, flags=re.S):
                body = "\n".join(ln.strip() for ln in region.strip().splitlines()).encode()
                found += [(name, body[:60]) for name, data in files.items()
                          if body in b"\n".join(ln.strip() for ln in data.splitlines())]
                for line in region.splitlines():
                    line = line.strip().lstrip("# ").strip()
                    public = json.dumps(line, ensure_ascii=False)[1:-1].encode() in release  # the exercise names it
                    if len(line) > 32 and not public:
                        for form in {line.encode(), json.dumps(line, ensure_ascii=False)[1:-1].encode()}:
                            found += [(name, line) for name, data in blob.items() if form in data]
    return found
