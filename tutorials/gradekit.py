"""Run student code on gloo ranks, each rank a process of its own, under a time budget: the
runner of the coding labs (tutorials/labs/source/lab9-11) and of their graders.

    results = run_ranks(program, 3, arg, budget_s=10)   # program(rank, world_size, arg) on 3 ranks
    results = run_lab("lab9", "try_conv", conv_worker=f)            # a lab's visible case
    conv, fc = one_process("lab9", "try_conv")                      # its parameters, one process
    verdict = grade("lab9", "conv_worker", conv_worker=f)           # {check: "ok" or why not}

`results` is one RankResult per rank: what the program returned, and a log of every
torch.distributed call it made (operation, bytes, peer, group size, times). A rank that raises,
dies, or has not returned `budget_s` after all ranks started makes the call raise RankFailure
with a one-line message (which rank, what, where in the student's code, which operation each
waiting rank is blocked in); every rank is ended before it returns.

Processes. The caller (a notebook kernel, a test) never hosts a rank: it starts a fresh
launcher, `python -m tutorials.gradekit`, in a session of its own (stanza_core.procgroup; the
whole job is ended if the launcher overruns). The launcher imports torch once, sets it to one
thread before any torch operation (a process that has started OpenMP's thread pool must not
fork), and forks one process per rank, each in a process group of its own: no rank pays for
importing torch. A rank joins a gloo group on 127.0.0.1 at a free port, wraps torch.distributed's
point-to-point and collective calls with counters, loads the program and the student's functions
(cloudpickle), runs, and saves its result (tensors, numbers, strings, lists, dicts: loaded with
torch.load(weights_only=True), so a result cannot run code where it is read). Its stdout and
stderr go to a file, never to the caller's stderr (nbgrader gives zero to a test cell that
writes to stderr).

Grading. A term grades the coding labs without this module's `grade`: the student's ranks run
jailed and the checks run in the grading process (tutorials.rank_grading). `grade` runs one
exercise's checks of the lab's grader module (tutorials/labs/source/<lab>/grader.py: CASES,
PARTS, program, grade) in a fresh launcher, for the kit's own tests: the student's functions
reach it as bytes (StudentCode) that only the ranks load, and the grader computes its references
itself. The graders are the instructor's kit: students get only the rank programs, without
references (the student bundle).
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib
import inspect
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from fractions import Fraction
from pathlib import Path

STARTUP_S = 60.0  # for all ranks to join the group and load the code (a busy laptop is slow)
GRACE_S = 0.5  # after one rank fails, for the others to report, before all are ended
REPO_ROOT = Path(__file__).resolve().parent.parent
P2P_PEER = {"send": "dst", "isend": "dst", "recv": "src", "irecv": "src"}
COLLECTIVES = ("all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor", "gather", "scatter",
               "reduce_scatter", "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "barrier",
               "all_gather_single", "reduce_scatter_single")
_FRESH = False  # True in the launcher: it may fork ranks itself
_GRADES: dict = {}  # (lab, part, hash of the student's functions) -> verdicts, shared by test cells


class RankFailure(RuntimeError):
    """A run that did not finish: a rank raised, died, or overran its budget (one-line message)."""


@dataclasses.dataclass(frozen=True)
class StudentCode:
    """The student's functions, pickled by value in the notebook; loaded only inside a rank."""

    blob: bytes

    @classmethod
    def of(cls, **functions) -> "StudentCode":
        import cloudpickle
        return cls(cloudpickle.dumps(functions))

    def load(self) -> dict:
        import cloudpickle
        return cloudpickle.loads(self.blob)


@dataclasses.dataclass
class RankResult:
    rank: int
    value: object  # what the program returned on this rank
    calls: list  # one dict per torch.distributed call: op, bytes, peer, group_size, t0, t1 (, t_wait)
    output: str = ""  # what the rank printed

    def bytes(self, *ops: str) -> int:
        """Payload bytes of this rank's calls to `ops` (send + isend: what it sent point to point)."""
        return sum(c["bytes"] for c in self.calls if c["op"] in ops)

    def ring_bytes(self, op: str = "all_reduce") -> Fraction:
        """What a ring allreduce moves per member for this rank's `op` calls: 2(n-1)/n of each."""
        return sum((Fraction(2 * (c["group_size"] - 1) * c["bytes"], c["group_size"])
                    for c in self.calls if c["op"] == op), Fraction(0))


def params_off(got: dict, want: dict, tol: float) -> str | None:
    """None if every tensor of `got` equals `want`'s within `tol` (absolute), else the worst one."""
    if set(got) != set(want):
        return f"returned parameters {sorted(got)}, expected {sorted(want)}"
    diffs = ((float((got[n].double() - want[n].double()).abs().max()), n) for n in want if got[n].shape == want[n].shape)
    worst = max(((d if d == d else float("inf"), n) for d, n in diffs), default=(0.0, ""))  # NaN: the worst
    shapes = [n for n in want if got[n].shape != want[n].shape]
    if shapes:
        return f"{shapes[0]} has shape {tuple(got[shapes[0]].shape)}, expected {tuple(want[shapes[0]].shape)}"
    return f"{worst[1]} is off by up to {worst[0]:.2g} (tolerance {tol:g})" if not worst[0] <= tol else None


def compare(got: dict, want: dict, tol: float = 1e-6) -> str | None:
    """None if every parameter of `got` equals `want`'s within `tol`, else which one is off and by
    how much: a visible test's check of the ranks against gradekit.one_process."""
    return params_off(got, want, tol)


# ------------------------------------------------------------------ inside a rank

def _nbytes(value) -> int:
    import torch
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (list, tuple)):
        return sum(_nbytes(v) for v in value)
    return 0


class _CountedWork:
    """An async operation's handle: its wait() is logged (t_wait) and shown while it blocks."""

    def __init__(self, work, entry, status):
        self._work, self._entry, self._status = work, entry, status

    def wait(self, *args, **kwargs):
        self._status(f"{self._entry['what']}.wait()")
        out = self._work.wait(*args, **kwargs)
        self._entry["t_wait"] = time.perf_counter()
        self._status("")
        return out

    def __getattr__(self, name):
        return getattr(self._work, name)


def _install_counters(log: list, status) -> None:
    """Replace torch.distributed's p2p and collective functions by counting wrappers (in both
    torch.distributed and distributed_c10d, so `from torch.distributed import send` is counted)."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    inside = threading.local()  # torch's send calls isend: count the outermost call only

    def wrap(name, fn):
        sig = inspect.signature(fn)

        @functools.wraps(fn)
        def counted(*args, **kwargs):
            if getattr(inside, "depth", 0):
                return fn(*args, **kwargs)
            inside.depth = 1
            try:
                return _counted(*args, **kwargs)
            finally:
                inside.depth = 0

        def _counted(*args, **kwargs):
            bound = sig.bind(*args, **kwargs).arguments
            peer = bound.get(P2P_PEER.get(name, ""), None)
            if peer is None and bound.get(f"group_{P2P_PEER.get(name, '')}") is not None:
                peer = dist.get_global_rank(bound.get("group"), bound[f"group_{P2P_PEER[name]}"])
            size = dist.get_world_size(bound.get("group"))
            payload = next((v for k, v in bound.items() if k not in ("group", "op", "async_op")), None)
            what = f"{name}({P2P_PEER[name]}={peer})" if name in P2P_PEER else f"{name}(group of {size})"
            entry = {"op": name, "bytes": _nbytes(payload), "peer": peer, "group_size": size,
                     "t0": time.perf_counter(), "t1": None, "what": what}
            log.append(entry)
            status(what)
            try:
                out = fn(*args, **kwargs)
            except BaseException as e:
                try:
                    e._gradekit_comm = True  # raised by communication: often a peer's failure, not this rank's
                except AttributeError:
                    pass
                raise
            entry["t1"] = time.perf_counter()
            status("")
            return _CountedWork(out, entry, status) if out is not None and hasattr(out, "wait") else out

        return counted

    for name in (*P2P_PEER, *COLLECTIVES):
        if hasattr(c10d, name):
            wrapped = wrap(name, getattr(c10d, name))
            setattr(c10d, name, wrapped)
            setattr(dist, name, wrapped)


def _student_frame(tb) -> str:
    """'in fn, line n' of the innermost frame outside torch, the standard library, this kit and
    the lab graders: the student's own code."""
    ours = (str(Path(__file__).resolve()), str(REPO_ROOT / "tutorials" / "labs"))
    system = tuple({sys.prefix, sys.base_prefix, sys.exec_prefix})
    for f in reversed(traceback.extract_tb(tb)):
        name = str(Path(f.filename).resolve()) if not f.filename.startswith("<") else f.filename
        if not name.startswith(ours) and not name.startswith(system) and "site-packages" not in name:
            return f" (in {f.name}, line {f.lineno})"
    return ""


def _one_line(e: BaseException) -> str:
    text = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), "")
    return f"{type(e).__name__}: {text[:240]}" if text else type(e).__name__


def _rank_main(rank: int, world: int, port: int, run_dir: Path, payload: Path, budget_s: float) -> None:
    """A forked rank: never returns (os._exit)."""
    code = 1
    try:
        os.setpgid(0, 0)  # a process group of its own (the launcher sets it too: no race with end())
        fd = os.open(run_dir / f"out{rank}.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        import datetime

        import cloudpickle
        import torch
        import torch.distributed as dist
        torch.set_num_threads(1)  # the ranks share the laptop's cores (and a fork must not enter OpenMP)
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=budget_s + STARTUP_S))
        log: list = []
        status_file = run_dir / f"op{rank}.txt"
        _install_counters(log, lambda text: status_file.write_text(text))
        program, args = cloudpickle.loads(payload.read_bytes())
        (run_dir / f"ready{rank}").touch()
        value = program(rank, world, *args)
        for entry in log:
            entry.pop("what")
        torch.save({"value": value, "calls": log}, run_dir / f"rank{rank}.tmp")
        os.replace(run_dir / f"rank{rank}.tmp", run_dir / f"rank{rank}.pt")
        code = 0
    except BaseException as e:  # noqa: BLE001 - every failure becomes the grader's one line
        # communication's errors: raised inside a counted call, or torch.distributed's own (a store
        # or a connection a dead peer held, outside any call: most often that peer's failure)
        comm = bool(getattr(e, "_gradekit_comm", False)) or isinstance(e, getattr(_dist(), "DistError", ()))
        why = {"msg": f"rank {rank} raised {_one_line(e)}{_student_frame(e.__traceback__)}", "comm": comm}
        (run_dir / f"err{rank}.json").write_text(json.dumps(why))
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


# ------------------------------------------------------------------ the launcher

class _Forked:
    """A forked rank, with the little of subprocess.Popen that procgroup.end uses."""

    def __init__(self, pid: int):
        self.pid, self.returncode = pid, None

    def poll(self):
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self):
        if self.returncode is None:
            self.returncode = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
        return self.returncode


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _dist():
    import torch.distributed as dist  # the rank has imported torch already: a lookup

    return dist


def _died(rank: int, code: int) -> str:
    if code < 0:
        return f"rank {rank} was killed by {signal.Signals(-code).name} before it returned"
    return f"rank {rank} exited with status {code} before it returned"


def _not_joined(run_dir: Path, world: int) -> str:
    """'' or the ranks that did not join a collective over all `world` ranks that others are (or
    were, when it failed) in: most often a collective called without the group= that names the
    ranks meant to join it."""
    inside: dict = {}
    for r in range(world):
        op = (run_dir / f"op{r}.txt").read_text() if (run_dir / f"op{r}.txt").exists() else ""
        m = re.match(r"(\w+)\(group of (\d+)\)", op)
        if m and int(m.group(2)) == world:
            inside.setdefault(m.group(1), []).append(r)
    for name, ranks in inside.items():
        out = [r for r in range(world) if r not in ranks]
        if out and len(ranks) < world:
            who = lambda rs: f"rank{'s' if len(rs) > 1 else ''} {', '.join(map(str, rs))}"  # noqa: E731
            return (f"{who(out)} did not join the {name} over all {world} ranks that {who(ranks)} called "
                    f"(a collective without the group= of the ranks meant to join it?)")
    return ""


def _failure(run_dir: Path, procs: list, finished: set) -> str:
    """The run's one line: the ranks' own errors first, then deaths, then errors that communication
    raised (most often a peer that failed first, or a rank that never joined a collective: then
    that is named first)."""
    own, deaths, comm = [], [], []
    for r, p in enumerate(procs):
        err = run_dir / f"err{r}.json"
        if err.exists():
            why = json.loads(err.read_text())
            (comm if why["comm"] else own).append(why["msg"])
        elif r not in finished and p.poll() is not None:
            deaths.append(_died(r, p.returncode))
    joined = _not_joined(run_dir, len(procs)) if comm and not own and not deaths else ""
    return "; ".join(([joined] if joined else []) + own + deaths + comm)


def _launch_here(program, args: tuple, world: int, budget_s: float, startup_s: float) -> list[RankResult]:
    import cloudpickle
    import torch
    from stanza_core import procgroup

    with tempfile.TemporaryDirectory(prefix="gradekit-") as tmp:
        run_dir = Path(tmp)
        (run_dir / "payload.pkl").write_bytes(cloudpickle.dumps((program, args)))
        for attempt in range(3):  # a free port can be taken by someone else before rank 0 binds it
            port, procs = _free_port(), []
            try:
                for r in range(world):
                    pid = os.fork()
                    if pid == 0:
                        _rank_main(r, world, port, run_dir, run_dir / "payload.pkl", budget_s)
                    procs.append(_Forked(pid))
                    try:
                        os.setpgid(pid, pid)
                    except OSError:  # the child did it first, or is gone already
                        pass
                message = _wait(run_dir, procs, budget_s, startup_s)
            finally:
                procgroup.end(*procs, grace_s=GRACE_S)
            if message is None:
                break
            if "address already in use" not in message.lower() or attempt == 2:
                raise RankFailure(message)
            for f in run_dir.iterdir():
                if f.name != "payload.pkl":
                    f.unlink()
        results = []
        for r in range(world):
            try:
                saved = torch.load(run_dir / f"rank{r}.pt", weights_only=True)
            except Exception as e:  # noqa: BLE001 - what the student returned, not our bug
                raise RankFailure(f"rank {r} returned something other than tensors, numbers, strings, lists and "
                                  f"dicts ({_one_line(e)[:120]})") from None
            out = (run_dir / f"out{r}.txt").read_text(errors="replace")[-4000:]
            results.append(RankResult(r, saved["value"], saved["calls"], out))
        return results


def _wait(run_dir: Path, procs: list, budget_s: float, startup_s: float) -> str | None:
    """None when every rank returned, else the one-line reason it did not."""
    t0, started, failed_at = time.monotonic(), None, None
    while True:
        now = time.monotonic()
        finished = {r for r in range(len(procs)) if (run_dir / f"rank{r}.pt").exists()}
        if len(finished) == len(procs):
            return None
        bad = any((run_dir / f"err{r}.json").exists() or (r not in finished and p.poll() is not None)
                  for r, p in enumerate(procs))
        if bad and failed_at is None:
            failed_at = now
        if failed_at is not None and (now - failed_at > GRACE_S or all(p.poll() is not None for p in procs)):
            return _failure(run_dir, procs, finished)
        if started is None and all((run_dir / f"ready{r}").exists() for r in range(len(procs))):
            started = now
        if started is None and now - t0 > startup_s:
            return f"the {len(procs)} ranks did not start within {startup_s:g} s"
        if started is not None and now - started > budget_s and failed_at is None:
            waiting = []
            for r in sorted(set(range(len(procs))) - finished):
                op = (run_dir / f"op{r}.txt").read_text() if (run_dir / f"op{r}.txt").exists() else ""
                waiting.append(f"rank {r} blocked in {op}" if op else f"rank {r} busy in its own code")
            return (f"timed out: not finished {budget_s:g} s after the ranks started: {', '.join(waiting)}"
                    + (f" (ranks {sorted(finished)} had returned)" if finished else "")
                    + (" - a deadlock?" if any("blocked" in w for w in waiting) else "")
                    + (f"; {joined}" if (joined := _not_joined(run_dir, len(procs))) else ""))
        time.sleep(0.01)


# ------------------------------------------------------------------ the caller's side

def _launcher(mode: str, *argv: str, timeout_s: float) -> None:
    from stanza_core import procgroup
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p),
           "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "tutorials.gradekit", mode, *argv]
    try:
        done = procgroup.run(cmd, timeout_s=timeout_s, capture_output=True, text=True, env=env, cwd=REPO_ROOT,
                             grace_s=1.0)
    except subprocess.TimeoutExpired:
        raise RankFailure(f"the grading run did not finish within {timeout_s:g} s and was ended") from None
    if done.returncode != 0:
        tail = [ln for ln in (done.stderr or "").splitlines() if ln.strip()][-1:] or ["(no message)"]
        raise RankFailure(f"the launcher failed (status {done.returncode}): {tail[0][:300]}")


def run_ranks(program, world_size: int, *args, budget_s: float = 10.0, startup_s: float = STARTUP_S) -> list[RankResult]:
    """program(rank, world_size, *args) on `world_size` gloo ranks, one process each; a RankResult per rank.
    Raises RankFailure (one line) if a rank raises, dies or has not returned `budget_s` after all started."""
    import cloudpickle
    if _FRESH:
        return _launch_here(program, args, world_size, budget_s, startup_s)
    import torch
    with tempfile.TemporaryDirectory(prefix="gradekit-") as tmp:
        payload, out = Path(tmp) / "payload.pkl", Path(tmp) / "results.pt"
        payload.write_bytes(cloudpickle.dumps((program, args, world_size, budget_s, startup_s)))
        _launcher("run", str(payload), str(out), timeout_s=budget_s + startup_s + 60)
        saved = torch.load(out, weights_only=True)
    if isinstance(saved, str):
        raise RankFailure(saved)
    return [RankResult(**r) for r in saved]


def run_checks(program, cases: dict, checks: dict[str, str], student: StudentCode, judge) -> dict[str, str]:
    """A grader's loop: run each case that `checks` ({check: case name}) names once, in the order of
    `cases`, and judge(check, results, case) -> "ok" or why not. Once a case fails to run, the later
    cases are not run (a hang would cost their budgets too) and their checks say so."""
    verdict, failed = {}, None
    for name in [n for n in cases if n in checks.values()]:
        case, mine = cases[name], [c for c, n in checks.items() if n == name]
        if failed:
            verdict.update({c: f"not run: {failed}" for c in mine})
            continue
        try:
            results = run_ranks(program, case["world_size"], case, student, budget_s=case["budget_s"])
        except RankFailure as e:
            verdict.update({c: str(e) for c in mine})
            failed = f"the {case['world_size']}-rank run failed first ({str(e)[:80]})"
            continue
        verdict.update({c: judge(c, results, case) for c in mine})
    return verdict


def _grader(lab: str):
    """The lab's grader (the instructor's kit), or, in the students' repository, its rank program
    (tutorials/labs/ranks/<lab>.py: no reference side, no checks; course.student_repo writes it)."""
    try:
        return importlib.import_module(f"tutorials.labs.source.{lab}.grader")
    except ModuleNotFoundError as e:
        if not (e.name or "").startswith("tutorials.labs"):
            raise
        return importlib.import_module(f"tutorials.labs.ranks.{lab}")


def run_lab(lab: str, case: str = "try", **functions) -> list[RankResult]:
    """One of a lab's cases (its grader's CASES) with the student's functions; prints what ranks printed."""
    grader = _grader(lab)
    c = grader.CASES[case]
    results = run_ranks(grader.program, c["world_size"], c, StudentCode.of(**functions), budget_s=c["budget_s"])
    for r in results:
        if r.output.strip():
            print("\n".join(f"[rank {r.rank}] {ln}" for ln in r.output.rstrip().splitlines()))
    return results


def one_process(lab: str, case: str = "try"):
    """The parameters after the same steps of the same model on the whole global batches in one
    process, for one of a lab's visible cases (named try*): what every rank's parameters of that
    case must equal (the lab grader's `reference`). A visible test compares the ranks with it, so
    a wrong loss scale fails before the lab is handed in."""
    if not case.startswith("try"):
        raise ValueError(f"{case}: only a visible case (try*) has its one-process run here")
    return _grader(lab).reference(_grader(lab).CASES[case])


def grade(lab: str, part: str, **functions) -> dict[str, str]:
    """The checks of one exercise (`part`) of a lab, run in a fresh process: {check: "ok" or the
    reason it failed}. Verdicts are kept per (lab, part, functions): a lab's test cells share a run."""
    return grade_parts(lab, [part], **functions)[part]


def grade_parts(lab: str, parts: list[str], **functions) -> dict[str, dict[str, str]]:
    """grade() for several exercises in one grading process: {part: {check: "ok" or why not}}."""
    code = StudentCode.of(**functions)
    digest = hashlib.sha256(code.blob).hexdigest()
    todo = [p for p in parts if (lab, p, digest) not in _GRADES]
    if todo:
        with tempfile.TemporaryDirectory(prefix="gradekit-") as tmp:
            student, out = Path(tmp) / "student.pkl", Path(tmp) / "verdict.json"
            student.write_bytes(code.blob)
            grader = _grader(lab)
            try:
                _launcher("grade", lab, ",".join(todo), str(student), str(out),
                          timeout_s=grader.TIME_LIMIT_S * len(todo))
                verdicts = json.loads(out.read_text())
            except RankFailure as e:
                verdicts = {p: {check: str(e) for check in grader.PARTS[p]} for p in todo}
        _GRADES.update({(lab, p, digest): verdicts[p] for p in todo})
    return {p: dict(_GRADES[(lab, p, digest)]) for p in parts}


def _main(argv: list[str]) -> int:
    """The launcher: `run PAYLOAD OUT` (run_ranks for a caller) or `grade LAB PART[,PART] STUDENT OUT`."""
    global _FRESH
    _FRESH = True
    import torch
    torch.set_num_threads(1)
    if argv[0] == "run":
        import cloudpickle
        program, args, world, budget_s, startup_s = cloudpickle.loads(Path(argv[1]).read_bytes())
        try:
            saved = [dataclasses.asdict(r) for r in _launch_here(program, args, world, budget_s, startup_s)]
        except RankFailure as e:
            saved = str(e)
        torch.save(saved, argv[2])
    elif argv[0] == "grade":
        grader, student = _grader(argv[1]), StudentCode(Path(argv[3]).read_bytes())
        Path(argv[4]).write_text(json.dumps({part: grader.grade(student, part) for part in argv[2].split(",")}))
    else:
        print(f"error: unknown mode {argv[0]!r} (run, grade)", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    from tutorials import gradekit  # the module itself (not this __main__ copy) holds _FRESH
    sys.exit(gradekit._main(sys.argv[1:]))
