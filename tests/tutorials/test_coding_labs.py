"""The coding labs (tutorials/labs/source/lab9-11) and their runner, tutorials.gradekit (the
reference solutions' full marks are test_grading_battery.py's): a planted wrong implementation
of each lab fails the checks of its own mistake and passes the others; a hang, an exception and a killed rank each end the run within its budget with a one-line
message and leave no process behind; a collective called without its group= names the rank
that did not join; patching the graders from the notebook's process changes no
verdict. The hidden tests and the cases agree with the graders' PARTS.

The students' code is taken from the instructor's notebooks (the solution cells), executed as a
notebook kernel would (module __main__), so that cloudpickle sends it to the ranks by value."""
import os
import re
import sys
import time

import cloudpickle
import nbformat
import pytest

from tutorials import course, gradekit

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the ranks cannot import this test module

CODING_LABS = ["lab9", "lab10", "lab11"]


def _cells(lab):
    return nbformat.read(course.SOURCE / lab / f"{lab}.ipynb", as_version=4).cells


def _meta(cell):
    return cell.metadata.get("nbgrader", {})


def _student(lab, replace=(), extra=""):
    """The lab's setup and solution cells, with `replace` [(old, new)] applied (each must match
    once) and `extra` appended, run as a notebook kernel runs them: {function name: function}."""
    code = "\n\n".join(c.source for c in _cells(lab) if c.cell_type == "code" and not _meta(c).get("grade"))
    for old, new in replace:
        assert code.count(old) == 1, (lab, old)
        code = code.replace(old, new)
    ns = {"__name__": "__main__"}
    exec(compile(code + "\n" + extra, f"<{lab} solution>", "exec"), ns)
    return {n: f for n, f in ns.items() if callable(f) and getattr(f, "__module__", "") == "__main__"}


def _functions(lab, part, **kw):
    fns = _student(lab, **kw)
    return {n: f for n, f in fns.items() if n == part}


@pytest.mark.parametrize("lab", CODING_LABS)
def test_hidden_tests_match_the_graders_parts(lab):
    """Every code answer is a grader PART; the test cell after it grades that part and counts its
    checks; no text, setup or visible test names the graders' internals."""
    cells, grader = _cells(lab), gradekit._grader(lab)
    answers = [c for c in cells if c.cell_type == "code" and _meta(c).get("solution")]
    assert [_meta(c)["grade_id"] for c in answers] == list(grader.PARTS)
    for i, c in enumerate(cells):
        if c not in answers:
            continue
        part = _meta(c)["grade_id"]
        test = cells[i + 1]
        hidden = test.source.split("### BEGIN HIDDEN TESTS")[1]
        assert _meta(test).get("grade") and f'gradekit.grade("{lab}", "{part}", {part}={part})' in hidden
        assert f"assert len(verdict) == {len(grader.PARTS[part])}" in hidden
        assert all(grader.CASES[case]["world_size"] in (2, 3, 4, 5) for case in grader.PARTS[part].values())
    seen = "\n".join(re.sub(r"### BEGIN SOLUTION.*?### END SOLUTION", "", c.source.split("### BEGIN HIDDEN TESTS")[0],
                            flags=re.S) for c in cells)
    for internal in ("grader", "reference(", "_side", "_judge", "run_checks", "params_off", "expected_bytes"):
        assert internal not in seen, (lab, internal)


# The reference solutions pass every check: test_grading_battery.py grades them as a term does
# (jailed, every check of every part), with the honest alternatives and the cheating students.


# Plausible mistakes, at least one per lab: (lab, part, [(old, new)] in the solution cells, the
# suffix of the checks it may fail). It fails at least one of those (the part's test cell gets no
# points) and passes every other check. (The FC loss over b equals the right one on 2 ranks, where
# b = G: the 4-rank case is what catches it.)
PLANTED = {
    "lab9 averaged CONV gradients": (  # though the FC worker's loss is already over G
        "lab9", "allreduce_conv_grads",
        [("dist.all_reduce(p.grad, group=plan.conv_group)",
          "dist.all_reduce(p.grad, group=plan.conv_group)\n        p.grad /= len(plan.conv_ranks)")], "parameters"),
    "lab9 FC loss over b, not G": (
        "lab9", "fc_worker", [("reduction=\"sum\") / plan.global_batch  #", ")  #")], "parameters"),
    "lab9 k FC workers average their FC gradients": (  # each FC worker's loss is already over G
        "lab9", "fc_worker_k",
        [("        dist.all_reduce(p.grad, group=plan.fc_group)",
          "        dist.all_reduce(p.grad, group=plan.fc_group)\n        p.grad /= len(plan.fc_ranks)")], "parameters"),
    "lab10 no division by the world size": (
        "lab10", "attach_bucketed_allreduce", [("            flat /= world\n", "")], "equal to one process"),
    "lab10 DDP without the initial broadcast": (  # every rank trains its own initial model
        "lab10", "DDP", [("                dist.broadcast(p, 0)\n", "                pass\n")],
        ("equal to one process", "broadcast")),
    "lab11 one micro-batch at a time": (  # never hangs, never a pipeline
        "lab11", "run_pipeline",
        [("handles = [dist.irecv(out, last) for out in outputs] + [dist.isend(x, 1) for x in micro_batches]\n"
          "        for h in handles:\n            h.wait()",
          "for x, out in zip(micro_batches, outputs):\n            dist.send(x, 1)\n            dist.recv(out, last)")],
        "in flight"),
    "lab11 parameter server pushing after the backward": (  # exact, the right bytes, no overlap
        "lab11", "attach_sharded_ps",
        [("        p.register_post_accumulate_grad_hook(hook)", "        pass"),
         ("        mine = [j for j in range(len(params)) if j % world == rank]",
          "        for p in params:\n            hook(p)\n        mine = [j for j in range(len(params)) if j % world == rank]")],
        "backward"),
    "lab11 GPipe one micro-batch at a time": (  # exact gradients and bytes, but a pipeline with no overlap
        "lab11", "gpipe_step",
        [("    for m in range(plan.micro_batches):\n        if first:", "    def forward_of(m):\n        if first:"),
         ("    for m in reversed(range(plan.micro_batches)):", "    def backward_of(m):"),
         ("    for handle in pending:", "    for m in range(plan.micro_batches):\n        forward_of(m)\n"
                                      "        backward_of(m)\n    for handle in pending:")],
        "bubble"),
}


@pytest.mark.slow
@pytest.mark.parametrize("mistake", PLANTED)
def test_a_planted_mistake_fails_its_checks_only(mistake):
    lab, part, replace, fails = PLANTED[mistake]
    verdict = gradekit.grade(lab, part, **_functions(lab, part, replace=replace))
    bad = {c for c, v in verdict.items() if v != "ok"}
    assert bad and bad <= {c for c in verdict if c.endswith(fails)}, verdict
    assert all("\n" not in v for v in verdict.values())
    assert {lab for lab, *_ in PLANTED.values()} == set(CODING_LABS)


@pytest.mark.slow
def test_a_bucketed_allreduce_launched_after_the_backward_fails_the_overlap_only():
    """The timeline check can fail: every bucket launched from finish() (so after the backward)."""
    replace = [("            launched[i] = (flat, dist.all_reduce(flat, async_op=True))",
                "            launched[i] = (flat, None)"),
               ("        for i, (flat, handle) in sorted(launched.items()):\n            handle.wait()",
                "        for i, (flat, handle) in sorted(launched.items()):\n"
                "            timeline.remove(next(e for e in reversed(timeline) if e[0] == 'start' and e[1] == i))\n"
                "            timeline.append(('start', i, time.perf_counter()))\n"
                "            dist.all_reduce(flat)")]
    verdict = gradekit.grade("lab10", "attach_bucketed_allreduce",
                             **_functions("lab10", "attach_bucketed_allreduce", replace=replace))
    assert {c for c, v in verdict.items() if v != "ok"} == {"3 ranks: overlap"}, verdict
    assert "no bucket's allreduce started before the backward ended" in verdict["3 ranks: overlap"]


@pytest.mark.slow
def test_a_deadlocked_pipeline_is_ended_within_its_budget():
    """The blocking pipeline of lab 11's text: the 2-rank case hangs, is ended after its budget
    with the operation each rank is blocked in; the larger cases are not run."""
    replace = [("handles = [dist.irecv(out, last) for out in outputs] + [dist.isend(x, 1) for x in micro_batches]\n"
                "        for h in handles:\n            h.wait()",
                "for x in micro_batches:\n            dist.send(x, 1)\n"
                "        for out in outputs:\n            dist.recv(out, last)")]
    grader = gradekit._grader("lab11")
    t0 = time.perf_counter()
    verdict = gradekit.grade("lab11", "run_pipeline", **_functions("lab11", "run_pipeline", replace=replace))
    took = time.perf_counter() - t0
    first = verdict["2 ranks x 4 micro-batches"]
    assert first.startswith("timed out: not finished 5 s after the ranks started")
    assert "rank 0 blocked in send(dst=1)" in first and "rank 1 blocked in send(dst=0)" in first and "deadlock" in first
    assert all(v.startswith("not run: the 2-rank run failed first") for c, v in verdict.items() if c != "2 ranks x 4 micro-batches")
    assert took < grader.CASES["pipe2"]["budget_s"] + gradekit.STARTUP_S, took


def _no_group(rank, world_size, wait_in_recv):
    import torch
    import torch.distributed as dist
    if rank < world_size - 1:
        dist.all_reduce(torch.ones(3))  # meant for ranks 0..N-2, called without their group=
    elif wait_in_recv:
        dist.recv(torch.zeros(1), 0)
    return rank


@pytest.mark.slow
def test_a_collective_without_its_group_names_the_rank_that_did_not_join():
    """Lab 9's classic mistake, an allreduce meant for the CONV workers called on the default
    group: the rank that stayed out returned (its peers' connections break) or waits elsewhere
    (the run times out); either way the line names it first."""
    from concurrent.futures import ThreadPoolExecutor

    def failure(wait_in_recv):
        with pytest.raises(gradekit.RankFailure) as e:
            gradekit.run_ranks(_no_group, 3, wait_in_recv, budget_s=2.0)
        return str(e.value)

    with ThreadPoolExecutor(2) as pool:
        returned, waiting = pool.map(failure, (False, True))
    said = "rank 2 did not join the all_reduce over all 3 ranks that ranks 0, 1 called"
    assert returned.startswith(said) and "\n" not in returned, returned
    assert waiting.startswith("timed out") and "rank 2 blocked in recv(src=0)" in waiting, waiting
    assert waiting.endswith(said + " (a collective without the group= of the ranks meant to join it?)"), waiting


def _spin(rank, world_size, pid_dir):
    open(os.path.join(pid_dir, str(os.getpid())), "w").close()
    while True:
        pass


def _raise(rank, world_size):
    import torch
    import torch.distributed as dist
    if rank == 1:
        raise ValueError("bad shape")
    dist.recv(torch.zeros(1), 1)


def _die(rank, world_size):
    import signal
    if rank == 0:
        os.kill(os.getpid(), signal.SIGKILL)
    return rank


@pytest.mark.slow
def test_a_hang_an_exception_and_a_killed_rank_give_one_line_each(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    def failure(*args, **kw):
        t0 = time.perf_counter()
        with pytest.raises(gradekit.RankFailure) as e:
            gradekit.run_ranks(*args, **kw)
        return str(e.value), time.perf_counter() - t0

    with ThreadPoolExecutor(3) as pool:  # three runs, each with its own launcher and ranks
        runs = [pool.submit(failure, _spin, 2, str(tmp_path), budget_s=1.0), pool.submit(failure, _raise, 2),
                pool.submit(failure, _die, 2)]
        (hang, hang_s), (boom, _), (killed, _) = [r.result() for r in runs]
    assert hang == ("timed out: not finished 1 s after the ranks started: rank 0 busy in its own code, "
                    "rank 1 busy in its own code")
    assert hang_s < 1.0 + gradekit.STARTUP_S
    pids = [int(p.name) for p in tmp_path.iterdir()]
    assert len(pids) == 2 and not [p for p in pids if os.path.exists(f"/proc/{p}")], "a rank outlived its run"
    assert boom.startswith("rank 1 raised ValueError: bad shape (in _raise, line "), boom
    assert killed.startswith("rank 0 was killed by SIGKILL before it returned"), killed
    assert "\n" not in hang + boom + killed


@pytest.mark.slow
def test_patching_the_grader_from_the_notebook_changes_no_verdict():
    """An answer that returns its own tensor (wrong) and patches, in the notebook's process and in
    its ranks, the grader's reference values and its check: the grading process has neither."""
    patch = ("import tutorials.labs.source.lab11.grader as _g\n"
             "_g.tensor_of = lambda seed, rank, m=0: torch.zeros(6)\n_g._ring = lambda *a: 'ok'\n")
    replace = [("    got = torch.empty_like(x)\n    handles = [dist.isend(x, (rank + 1) % world_size), "
                "dist.irecv(got, (rank - 1) % world_size)]",
                "    " + patch.replace("\n", "\n    ") + "got = x.clone()\n    handles = []")]
    import tutorials.labs.source.lab11.grader as g
    saved = g.tensor_of, g._ring
    try:
        fns = _functions("lab11", "ring_shift", replace=replace, extra=patch)
        assert g._ring(None, None) == "ok"  # patched here, as a notebook cell would
        verdict = gradekit.grade("lab11", "ring_shift", **fns)
    finally:
        g.tensor_of, g._ring = saved
    assert verdict["2 ranks"].startswith("rank 0 returned tensor("), verdict
