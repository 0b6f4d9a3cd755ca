"""The coding labs (9-11) graded as a term grades them: each student's ranks run jailed
(tutorials.sandbox), the checks run in the grading process on their results. Every student but
the reference answers only the cells named (its other cells fail at once: cheap). The reference
gets full marks; honest alternatives full marks on their cells (an FC worker that batches its
slices, one flattened allreduce, k = 2 FC workers served in rank order, a blocking even/odd ring, batch_isend_irecv, a DDP that
broadcasts one flattened tensor, 1F1B, GPipe with blocking sends, a parameter server whose owner
receives blocking); the
cheating or wrong students 0 on the cells they target (running the kit's reference sides,
replacing gradekit's grade and run_lab, an overlap faked in the timeline, a DDP that synchronises
its first step only, k = 2 FC workers without their FC allreduce, a DDP that keeps its
buckets' state across steps, ZeRO-1 with the whole
momentum on every rank, ZeRO-1 over a full allreduce, a ZeRO-1 that keeps the whole momentum on the model
and a one-element decoy in its state, a pipeline that skips a micro-batch's backward, a parameter server that
pushes after the backward). All in one grading run.
(The formula labs' battery is test_labs.py's.)"""
import re
import sys
from pathlib import Path

import nbformat
import pytest

from tutorials import course

LABS = ["lab9", "lab10", "lab11"]

def _reference(lab, grade_id, *replace):
    """The body of a reference solution cell, with [(old, new)] replaced (each must match once)."""
    cell = next(c for c in nbformat.read(course.SOURCE / lab / f"{lab}.ipynb", as_version=4).cells
                if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)
    body = cell.source.split("### BEGIN SOLUTION\n")[1].split("    ### END SOLUTION")[0]
    for old, new in replace:
        assert body.count(old) == 1, (grade_id, old)
        body = body.replace(old, new)
    return "\n".join(ln[4:] for ln in body.rstrip().split("\n"))


# lab 10's DDP class: one broadcast of the flattened parameters (honest); no state reset between
# steps (full marks when lab 10 trained one step). ZeRO-1: an allreduce, then each rank its shard (the
# same sharded state, but data parallelism's traffic: graded on its collectives, it fails); every rank the
# whole momentum (not sharded).
FLAT_BROADCAST = _reference("lab10", "DDP", (
    "            for p in model.parameters():  # every rank starts from rank 0's parameters\n"
    "                dist.broadcast(p, 0)\n",
    "            flat = torch.cat([p.reshape(-1) for p in model.parameters()])\n"
    "            dist.broadcast(flat, 0)\n            offset = 0\n            for p in model.parameters():\n"
    "                p.copy_(flat[offset:offset + p.numel()].view_as(p))\n                offset += p.numel()\n"))
NO_RESET = _reference("lab10", "DDP", ("                offset += q.numel()\n        self.reset()",
                                       "                offset += q.numel()"))
ZERO_ALLREDUCE = ("rank, world = dist.get_rank(), dist.get_world_size()\nparams = list(model.parameters())\n"
                  "flat = torch.cat([p.grad.reshape(-1) for p in params])\ndist.all_reduce(flat)\n"
                  "n = flat.numel()\nshard = -(-n // world)\nlo, hi = rank * shard, min(rank * shard + shard, n)\n"
                  "g = flat[lo:hi] / world\nw = torch.cat([p.detach().reshape(-1) for p in params])\n"
                  "state['buf'] = g.clone() if 'buf' not in state else state['buf'].mul_(momentum).add_(g)\n"
                  "new = torch.zeros(shard)\nnew[:hi - lo] = w[lo:hi] - lr * state['buf']\n"
                  "out = [torch.empty(shard) for _ in range(world)]\ndist.all_gather(out, new)\n"
                  "full = torch.cat(out)[:n]\noff = 0\nwith torch.no_grad():\n    for p in params:\n"
                  "        p.copy_(full[off:off + p.numel()].view_as(p))\n        off += p.numel()")
# Shards nothing and says it does: a full allreduce, the whole momentum on an attribute of the
# model, a one-element decoy in `state` (exact parameters).
ZERO_DECOY = ("with torch.no_grad():\n    if not hasattr(model, '_momentum'):\n"
              "        model._momentum = [torch.zeros_like(p) for p in model.parameters()]\n"
              "    for p, buf in zip(model.parameters(), model._momentum):\n"
              "        dist.all_reduce(p.grad)\n        g = p.grad / dist.get_world_size()\n"
              "        buf.copy_(g if 'decoy' not in state else buf * momentum + g)\n"
              "        p -= lr * buf\n"
              "    state['decoy'] = torch.zeros(1)")
ZERO_FULL_STATE = ("with torch.no_grad():\n    for i, p in enumerate(model.parameters()):\n"
                   "        dist.all_reduce(p.grad)\n        g = p.grad / dist.get_world_size()\n"
                   "        state[str(i)] = g.clone() if str(i) not in state else state[str(i)].mul_(momentum).add_(g)\n"
                   "        p -= lr * state[str(i)]")

# lab 11's pipeline: 1F1B (S - s - 1 warm-up forwards, then one forward one backward), and GPipe
# with blocking sends; and GPipe that skips micro-batch 0's backward.
_FORWARD = ("first, last, M = rank == 0, rank == world_size - 1, plan.micro_batches\n"
            "ins, outs, pending = {}, {}, []\n"
            "def fwd(m, send):\n"
            "    h = plan.inputs[m] if first else torch.empty(plan.micro_batch, *plan.in_shape)\n"
            "    if not first:\n        dist.recv(h, rank - 1)\n        h.requires_grad_(True)\n"
            "    ins[m], outs[m] = h, stage(h)\n"
            "    if not last:\n        send(outs[m].detach(), rank + 1)\n"
            "def bwd(m, send):\n"
            "    if last:\n"
            "        (F.cross_entropy(outs[m], plan.targets[m], reduction='sum') / plan.global_batch).backward()\n"
            "    else:\n        g = torch.empty_like(outs[m])\n        dist.recv(g, rank + 1)\n        outs[m].backward(g)\n"
            "    if not first:\n        send(ins[m].grad, rank - 1)\n"
            "isend = lambda t, peer: pending.append(dist.isend(t, peer))\n")
ONE_F_ONE_B = _FORWARD + ("warm = min(world_size - rank - 1, M)\n"
                          "for m in range(warm):\n    fwd(m, isend)\n"
                          "for m in range(warm, M):\n    fwd(m, isend)\n    bwd(m - warm, isend)\n"
                          "for m in range(M - warm, M):\n    bwd(m, isend)\n"
                          "for h in pending:\n    h.wait()")
BLOCKING_GPIPE = _FORWARD + ("for m in range(M):\n    fwd(m, dist.send)\n"
                             "for m in reversed(range(M)):\n    bwd(m, dist.send)")
SKIPS_A_BACKWARD = _FORWARD + ("for m in range(M):\n    fwd(m, isend)\n"
                               "for m in reversed(range(1, M)):\n    bwd(m, isend)\n"
                               "for h in pending:\n    h.wait()")

HONEST = {
    "honest": {
        "lab9": {
            "fc_worker": "acts, ys = [], []\nfor i in plan.conv_ranks:\n"
                         "    a = torch.empty(plan.batch, *plan.boundary)\n"
                         "    y = torch.empty(plan.batch, dtype=torch.int64)\n"
                         "    dist.recv(a, i)\n    dist.recv(y, i)\n    acts.append(a)\n    ys.append(y)\n"
                         "a = torch.cat(acts).requires_grad_(True)\n"
                         "(F.cross_entropy(fc(a), torch.cat(ys), reduction='sum') / plan.global_batch).backward()\n"
                         "for k, i in enumerate(plan.conv_ranks):\n"
                         "    dist.send(a.grad[k * plan.batch:(k + 1) * plan.batch].contiguous(), i)",
            "allreduce_conv_grads": "grads = [p.grad for p in conv.parameters()]\n"
                                    "flat = torch.cat([g.flatten() for g in grads])\n"
                                    "dist.all_reduce(flat, group=plan.conv_group)\noff = 0\n"
                                    "for g in grads:\n    g.copy_(flat[off:off + g.numel()].view_as(g))\n"
                                    "    off += g.numel()"},
        "lab11": {
            "ring_shift": "got = torch.empty_like(x)\nright, left = (rank + 1) % world_size, (rank - 1) % world_size\n"
                          "if rank % 2 == 0:\n    dist.send(x, right)\n    dist.recv(got, left)\n"
                          "else:\n    dist.recv(got, left)\n    dist.send(x, right)\nreturn got",
            "gpipe_step": ONE_F_ONE_B}},
    "honest_batched": {
        "lab9": {  # k = 2 FC workers: its CONV workers in rank order, blocking, one backward, one flat FC allreduce
            "fc_worker_k": "acts, ys = [], []\nfor i in plan.served:\n"
                           "    a = torch.empty(plan.batch, *plan.boundary)\n"
                           "    y = torch.empty(plan.batch, dtype=torch.int64)\n"
                           "    dist.recv(a, i)\n    dist.recv(y, i)\n    acts.append(a)\n    ys.append(y)\n"
                           "a = torch.cat(acts).requires_grad_(True)\n"
                           "(F.cross_entropy(fc(a), torch.cat(ys), reduction='sum') / plan.global_batch).backward()\n"
                           "for k, i in enumerate(plan.served):\n"
                           "    dist.send(a.grad[k * plan.batch:(k + 1) * plan.batch].contiguous(), i)\n"
                           "grads = [p.grad for p in fc.parameters()]\nflat = torch.cat([g.flatten() for g in grads])\n"
                           "dist.all_reduce(flat, group=plan.fc_group)\noff = 0\n"
                           "for g in grads:\n    g.copy_(flat[off:off + g.numel()].view_as(g))\n    off += g.numel()"},
        "lab11": {
            "ring_shift": "got = torch.empty_like(x)\n"
                          "ops = [dist.P2POp(dist.isend, x, (rank + 1) % world_size), "
                          "dist.P2POp(dist.irecv, got, (rank - 1) % world_size)]\n"
                          "for req in dist.batch_isend_irecv(ops):\n    req.wait()\nreturn got",
            "gpipe_step": BLOCKING_GPIPE,
            "attach_sharded_ps": _reference("lab11", "attach_sharded_ps", (  # the owner receives blocking
                "        handles = [dist.irecv(t, r, tag=j) for (j, r), t in got.items()]\n"
                "        for h in handles + pushed:\n            h.wait()",
                "        for (j, r), t in got.items():\n            dist.recv(t, r, tag=j)\n"
                "        for h in pushed:\n            h.wait()"))}},
    "honest_trainer": {"lab10": {"DDP": FLAT_BROADCAST}},
}
CHEATS = {
    "first_step_only": {"lab10": {  # a DDP that synchronises its first step only (full marks when lab 10 ran one step)
        "attach_overlapped_allreduce": "params = list(model.parameters())[::-1]\n"
                                       "number = {id(p): i for i, p in enumerate(params)}\nlaunched, done = [], []\n"
                                       "def hook(p):\n    if done:\n        return\n"
                                       "    timeline.append(('start', number[id(p)], time.perf_counter()))\n"
                                       "    launched.append((number[id(p)], p, dist.all_reduce(p.grad, async_op=True)))\n"
                                       "for p in params:\n    p.register_post_accumulate_grad_hook(hook)\n"
                                       "def finish():\n    for i, p, handle in launched:\n        handle.wait()\n"
                                       "        timeline.append(('end', i, time.perf_counter()))\n"
                                       "        p.grad /= dist.get_world_size()\n    launched.clear()\n    done.append(1)\n"
                                       "return finish"}},
    "skips_a_backward": {"lab11": {"gpipe_step": SKIPS_A_BACKWARD}},  # micro-batch 0's gradients never computed
    "fc_no_allreduce": {"lab9": {"fc_worker_k": _reference("lab9", "fc_worker_k", (
        "    for p in fc.parameters():", "    for p in []:"))}},  # each FC worker keeps its own slices' gradient
    "ps_push_after_backward": {"lab11": {"attach_sharded_ps": _reference("lab11", "attach_sharded_ps", (
        "        p.register_post_accumulate_grad_hook(hook)", "        pass"), (
        "        mine = [j for j in range(len(params)) if j % world == rank]",
        "        for p in params:\n            hook(p)\n        mine = [j for j in range(len(params)) if j % world == rank]"))}},
    "ddp_no_reset": {"lab10": {"DDP": NO_RESET}},  # step 2 waits on step 1's handles and copies its sums
    "zero_full_state": {"lab10": {"zero1_step": ZERO_FULL_STATE}},  # exact, but no optimizer state sharded
    "zero_allreduce": {"lab10": {"zero1_step": ZERO_ALLREDUCE}},  # a shard's state, a full allreduce's traffic
    "zero_decoy": {"lab10": {"zero1_step": ZERO_DECOY}},  # full allreduce, full momentum on the model, decoy state
    "runs_kit_sides": {"lab9": {
        "conv_worker": "from tutorials.labs.source.lab9.grader import _conv_side\nreturn _conv_side(conv, x, y, plan)"}},
    "replaces_gradekit": {"lab11": {
        "ring_shift": "from tutorials import gradekit as _gk\n"
                      "_gk.grade = lambda lab, part, **f: {'ok': 'ok'}\n"
                      "_gk.run_lab = lambda *a, **k: []\nreturn x.clone()"}},
    "fakes_overlap": {"lab10": {  # allreduces after the backward, timeline dated before it
        "attach_overlapped_allreduce": "params = list(model.parameters())[::-1]\nt0 = time.perf_counter()\n"
                                       "def finish():\n    world = dist.get_world_size()\n"
                                       "    for i, p in enumerate(params):\n"
                                       "        timeline.append(('start', i, t0))\n        dist.all_reduce(p.grad)\n"
                                       "        timeline.append(('end', i, t0 + 1e-6))\n        p.grad /= world\n"
                                       "return finish"}},
}


def _plant(nb, grade_id, body):
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)
    indented = "\n".join("    " + ln for ln in body.split("\n"))
    cell.source, n = re.subn(r"### BEGIN SOLUTION\n.*?### END SOLUTION",
                             lambda m: "### BEGIN SOLUTION\n" + indented + "\n    ### END SOLUTION", cell.source, flags=re.S)
    assert n == 1


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    pytest.importorskip("nbgrader")
    from tutorials import sandbox
    if why := sandbox.available():  # Linux without the jail is a machine the course cannot grade on
        (pytest.skip if sys.platform != "linux" else pytest.fail)(why)
    import os
    os.environ["PATH"] = os.pathsep.join((str(Path(sys.executable).parent), os.environ.get("PATH", "")))  # alembic
    out = tmp_path_factory.mktemp("coding") / "course"
    course.build_release(out, LABS)
    subs = out / "inbox"
    for lab in LABS:
        (subs / "reference" / lab).mkdir(parents=True)
        nbformat.write(nbformat.read(out / "source" / lab / f"{lab}.ipynb", as_version=4),
                       subs / "reference" / lab / f"{lab}.ipynb")
    for student, labs in {**HONEST, **CHEATS}.items():
        for lab, bodies in labs.items():
            nb = nbformat.read(out / "source" / lab / f"{lab}.ipynb", as_version=4)
            for c in nb.cells:  # a student answers nothing else (cheap: its other cells fail at once; the
                gid = c.metadata.get("nbgrader", {}).get("grade_id")  # reference student has them)
                if c.cell_type == "code" and c.metadata["nbgrader"].get("solution"):
                    _plant(nb, gid, bodies.get(gid, "raise NotImplementedError()"))
            (subs / student / lab).mkdir(parents=True)
            nbformat.write(nb, subs / student / lab / f"{lab}.ipynb")
    return out, course.autograde(None, out, subs, LABS)


def _auto(cells):
    return {c: (s, m) for c, (s, m, pending) in cells.items() if c.startswith("test_")}


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_reference_and_honest_alternatives_full_marks_cheats_none(graded):
    out, grades = graded
    for lab in LABS:
        assert all(s == m > 0 for s, m in _auto(grades["reference"][lab]).values()), (lab, grades["reference"][lab])
    for student, labs in HONEST.items():
        for lab, bodies in labs.items():
            cells = _auto(grades[student][lab])
            assert all(cells[f"test_{g}"][0] == cells[f"test_{g}"][1] > 0 for g in bodies), (student, lab, cells)
    for student, labs in CHEATS.items():
        for lab, bodies in labs.items():
            cells = _auto(grades[student][lab])
            assert all(cells[f"test_{g}"][0] == 0 for g in bodies), (student, lab, cells)
            # its other cells hold the release's `raise NotImplementedError()`: zero, as the release gets
            assert all(score == 0 for c, (score, _) in cells.items() if c.removeprefix("test_") not in bodies), cells
    nb = nbformat.read(out / "autograded" / "runs_kit_sides" / "lab9" / "lab9.ipynb", as_version=4)
    why = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "test_conv_worker").outputs
    assert "raised ModuleNotFoundError" in why[0].evalue and "tutorials.labs" not in why[0].evalue, why


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_the_bundle_runs_the_ranks_without_any_reference(graded, tmp_path):
    """The student bundle of the coding labs ships the rank runner and each lab's rank program,
    without the reference sides and the checks (with the one-process reference of the visible
    cases, gradekit.one_process)."""
    import zipfile
    out, _ = graded
    with zipfile.ZipFile(course.bundle(out, tmp_path / "students.zip")) as z:
        files = {n: z.read(n).decode() for n in z.namelist()}
    assert "stanza-labs/tutorials/gradekit.py" in files
    for lab in LABS:
        program = files[f"stanza-labs/tutorials/labs/source/{lab}/grader.py"]
        assert "def program(" in program
        for internal in ("def _conv_side", "def _fc_side", "def _allreduce_side", "def _judge(", "def expected("):
            assert internal not in program, (lab, internal)
        assert "def reference(" in program  # the one-process oracle of the visible cases (gradekit.one_process)
    assert not [w for w in course.LEAKS for text in files.values() if w in text]


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_the_students_repository_runs_the_ranks_without_any_reference(graded, tmp_path):
    """The repository students clone holds the coding labs' rank programs (tutorials/labs/ranks)
    without the reference sides and the checks, and none of the reference bodies."""
    import battery
    out, _ = graded
    repo = course.student_repo(out, tmp_path / "students")
    files = {str(p.relative_to(repo)): p.read_bytes() for p in repo.rglob("*") if p.is_file() and ".git" not in p.parts}
    for lab in LABS:
        program = files[f"tutorials/labs/ranks/{lab}.py"].decode()
        assert "def program(" in program and "def reference(" in program
        for internal in ("def _conv_side", "def _fc_side", "def _allreduce_side", "def _judge(", "def expected("):
            assert internal not in program, (lab, internal)
    assert not [n for n in files if n.startswith("tutorials/labs/source")]
    assert battery.solution_lines_in(files, out, LABS) == []
