"""A program (sim/program.py) timed on SimGrid: one actor per rank executing its steps.

    python -m stanza_core.sim.executor PROGRAM.json PLATFORM.json OUT.json

Runs in a process of its own (SimGrid's engine is one per process) and imports nothing but the
standard library, SimGrid's Python bindings (Debian's python3-simgrid) and the program format.

The platform (`platform` below, from sim.cluster.Platform): one host per rank, each with one
full-duplex link into a switch (SimGrid's star zone: a split-duplex link per host, so a message
crosses its sender's up link and its receiver's down link) at the payload rate the emulated
cluster shapes each link to, with a latency per message (the link's delay plus a per-message
cost). Bandwidth is shared max-min fairly among the flows on a link (SimGrid's CM02 model, no
correction factors; cross-traffic off: TCP's acknowledgements, one 66-byte frame per two
9000-byte segments, take under 0.5 % of the reverse link).

An actor executes its rank's operations in program order:
  compute       sleep_for(seconds) (consecutive computes as one sleep)
  send / recv   a put / get on the mailbox of (sender, receiver, group, tag): a message starts
                once both sides have posted it (gloo's rendezvous: the receiver announces its
                buffer) and matches in posting order; the messages of one connection (sender,
                receiver, process group: gloo keeps one per pair and group) travel one after
                another in posting order, so concurrent messages to one peer do not share its
                link but queue (this rule was adopted after the fair-sharing form timed the fit
                half's overlapped-push configuration 16 % slow: sim/validation.py); a
                message posted on an idle connection is put by its sender's actor directly,
                and only a connection with a message still travelling gets an actor of its own
                that puts the queued ones in turn (SimGrid's thread contexts: a thread an actor,
                and an actor per connection stopped a ps of 128 ranks: 16,256 connections)
  collective    handed to its group's runner, which starts once every member has posted it and
                runs it as the algorithm's point-to-point messages (below); gloo runs up to two
                of a process group's collectives at once (ProcessGroupGloo's two worker threads),
                so does each group's runner; later ones queue in launch order
  wait          until every operation named has finished
  as_completed  Comm.wait_any over the groups' receives; each group's body runs as soon as its
                last receive finishes; the `last` collectives are launched from the body that
                runs last, at their position in it
Between steps every rank meets in a barrier (the engine's one allreduce of the loss between
steps, outside the timed step); a step's time is the longest of the ranks' spans from the
barrier to the end of their step, as the metrics' time_s is.

Ring allreduce among n ranks (the algorithm gloo runs for allreduce and the performance model
prices): the buffer in n chunks, n - 1 rounds of reduce-scatter and n - 1 of all-gather, in each
round every member sending one chunk to the next member; a round ends when its n messages have
arrived ("expanded": 2(n-1) n messages). "merged" sends each ring edge's 2(n-1) chunks as one
flow after (2(n-1) - 1) route latencies: the same bytes on every link, for large n where the
expanded form's messages would dominate the simulation's own cost (sim.cluster.RING_EXPANDED_UP_TO).
"""
from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path
from typing import Any

DEBIAN_SO = "/usr/lib/python3/dist-packages/simgrid.cpython-{v}-x86_64-linux-gnu.so"
INSTALL = ("SimGrid's Python bindings are missing: `make install` installs Debian's python3-simgrid "
           "(apt-get install python3-simgrid, Python 3.11)")


class SimUnavailable(RuntimeError):
    """No SimGrid here: one line saying how to get it."""


def load_simgrid():
    """The `simgrid` module: importable, or Debian's one .so (built for the system's CPython 3.11)
    loaded into this interpreter when the versions match."""
    try:
        import simgrid  # noqa: F401

        return simgrid
    except ImportError:
        pass
    path = Path(DEBIAN_SO.format(v=f"{sys.version_info.major}{sys.version_info.minor}"))
    if not path.is_file():
        raise SimUnavailable(INSTALL)
    spec = importlib.util.spec_from_file_location("simgrid", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["simgrid"] = mod
    try:
        spec.loader.exec_module(mod)
    except ImportError as e:
        del sys.modules["simgrid"]
        raise SimUnavailable(f"{INSTALL}; loading {path} failed: {e}") from None
    return mod


def ring_chunks(nbytes: int, n: int) -> list[int]:
    """The buffer's n chunks (near-equal, the first ones a byte larger)."""
    return [nbytes // n + (1 if i < nbytes % n else 0) for i in range(n)]


def ring_sends(nbytes: int, n: int) -> list[list[int]]:
    """Per round, the bytes member i sends to member i + 1 (reduce-scatter, then all-gather)."""
    c = ring_chunks(nbytes, n)
    rounds = [[c[(i - s) % n] for i in range(n)] for s in range(n - 1)]
    rounds += [[c[(i + 1 - s) % n] for i in range(n)] for s in range(n - 1)]
    return rounds


class _Message:
    __slots__ = ("id", "tag", "nbytes", "sem")

    def __init__(self, sg, op):
        self.id, self.tag, self.nbytes = op["id"], op["tag"], int(op["bytes"])
        self.sem = sg.Semaphore(0)


class _Collective:
    __slots__ = ("group", "members", "nbytes", "arrived", "sem", "done")

    def __init__(self, sg, group, members, nbytes):
        self.group, self.members, self.nbytes = group, members, nbytes
        self.arrived, self.done = 0, False
        self.sem = sg.Semaphore(0)


class Simulation:
    """One program on one platform (the module docstring)."""

    def __init__(self, doc: dict[str, Any], platform: dict[str, Any]):
        sg = self.sg = load_simgrid()
        self.doc, self.plat = doc, platform
        self.world = len(doc["ranks"])
        hosts = int(platform.get("hosts", self.world))
        if hosts != self.world:
            raise ValueError(f"the platform has {hosts} hosts, the program {self.world} ranks")
        self.engine = sg.Engine(["stanza-sim", "--cfg=network/model:CM02", "--cfg=network/crosstraffic:0",
                                 "--log=root.thresh:critical", "--log=xbt_cfg.thresh:critical"])
        zone = sg.NetZone.create_star_zone("cluster")
        bw = float(platform["bandwidth_Bps"])
        self.route_latency = float(platform["latency_s"]) + float(platform.get("per_message_s", 0.0))
        self.hosts = []
        for i in range(self.world):
            h = zone.create_host(f"n{i}", 1e9)
            link = zone.create_split_duplex_link(f"l{i}", bw).set_latency(self.route_latency / 2).seal()
            zone.add_route(h.netpoint, None, None, None, [sg.LinkInRoute(link, sg.LinkInRoute.Direction.UP)], True)
            self.hosts.append(h)
        zone.seal()
        self.ring = platform.get("ring", "expanded")
        self.threads = int(platform.get("collective_threads", 2))
        self.groups = doc["groups"]
        self.coll_seq: dict[tuple[int, str], int] = {}
        self.colls: dict[tuple[str, int], _Collective] = {}
        self.queue: dict[str, list[_Collective]] = {g: [] for g in self.groups}
        self.running: dict[str, int] = {g: 0 for g in self.groups}
        self.conn_queue: dict[tuple, list] = {}
        self.conn_busy: set[tuple] = set()
        self.conn_last: dict[tuple, Any] = {}  # a connection's message put directly, while it travels
        self.link_up = [0] * self.world
        self.link_down = [0] * self.world
        self.messages = 0
        self.steps = len(doc["ranks"][0]["steps"])
        self.spans = [[None] * self.world for _ in range(self.steps)]
        self.compute = [[0.0] * self.world for _ in range(self.steps)]
        self.barrier = sg.Barrier(self.world)

    # -- the run ---------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        t0 = time.perf_counter()
        for r in range(self.world):
            self.sg.Actor.create(f"rank{r}", self.hosts[r], self._rank, r)
        self.engine.run()
        wall = time.perf_counter() - t0
        steps = []
        for t in range(self.steps):
            spans = [b - a for a, b in self.spans[t]]
            steps.append({"time_s": max(spans), "span_s": spans, "compute_s": self.compute[t]})
        return {"steps": steps, "link_up_bytes": self.link_up, "link_down_bytes": self.link_down,
                "messages": self.messages, "wall_s": wall, "platform": self.plat}

    def _rank(self, r: int):
        sg = self.sg
        for t, ops in enumerate(self.doc["ranks"][r]["steps"]):
            self.barrier.wait()
            start = sg.Engine.clock
            state = {"h": {}, "done": set(), "sleep": 0.0, "t": t, "r": r}
            self._ops(ops, state)
            self._flush(state)
            self.spans[t][r] = (start, sg.Engine.clock)
        self.barrier.wait()

    def _flush(self, st):
        if st["sleep"] > 0:
            s, st["sleep"] = st["sleep"], 0.0
            self.sg.this_actor.sleep_for(s)

    def _ops(self, ops, st):
        for op in ops:
            self._op(op, st)

    def _op(self, op, st):
        kind, r = op["type"], st["r"]
        if kind == "compute":
            st["sleep"] += op["seconds"]
            self.compute[st["t"]][r] += op["seconds"]
            return
        self._flush(st)
        if kind == "send":
            st["h"][op["id"]] = self._send(r, op)
            self.link_up[r] += op["bytes"]
            self.link_down[op["peer"]] += op["bytes"]
            self.messages += 1
        elif kind == "recv":
            mb = self.sg.Mailbox.by_name(f"{op['peer']}>{r}|{op['group']}|{op['tag']}")
            comm, data = mb.get_async()  # `data` kept alive until the step ends: the binding's buffer
            st["h"][op["id"]] = ("comm", comm, data)
        elif kind == "collective":
            st["h"][op["id"]] = ("coll", self._launch(r, op))
        elif kind == "wait":
            for i in op["on"]:
                self._wait(i, st)
        elif kind == "as_completed":
            self._as_completed(op, st)
        else:
            raise ValueError(f"unknown operation {kind!r}")

    def _wait(self, i, st):
        if i in st["done"]:
            return
        what, h = st["h"][i][:2]
        if what == "comm":
            h.wait()
        else:  # a collective, or a send on its connection
            h.sem.acquire()
        st["done"].add(i)

    def _as_completed(self, op, st):
        groups = [list(g) for g in op["on"]]
        bodies = op["bodies"]
        left = set(range(len(groups)))
        lasts = {}
        for e in op.get("last", []):
            lasts.setdefault(e["at"], []).append(e["op"])
        while left:
            ready = [j for j in sorted(left) if all(i in st["done"] for i in groups[j])]
            if not ready:
                self._flush(st)
                pending = [i for j in sorted(left) for i in groups[j] if i not in st["done"]]
                comms = [st["h"][i][1] for i in pending]
                k = self.sg.Comm.wait_any(comms)
                st["done"].add(pending[k])
                continue
            for j in ready:
                left.discard(j)
                final = not left
                self._body(bodies[j], st, lasts if final else None)

    def _body(self, ops, st, lasts):
        for i, op in enumerate(ops):
            if lasts:
                for e in lasts.get(i, ()):
                    self._op(e, st)
            self._op(op, st)
        if lasts:
            for e in lasts.get(len(ops), ()):
                self._op(e, st)

    # -- sends: one connection per (sender, receiver, group), its messages one after another ------
    def _send(self, r: int, op) -> tuple:
        key = (r, op["peer"], op["group"])
        last = self.conn_last.get(key)
        if key not in self.conn_busy and (last is None or last.test()):
            mb = self.sg.Mailbox.by_name(f"{r}>{op['peer']}|{op['group']}|{op['tag']}")
            self.conn_last[key] = comm = mb.put_async(op["id"], int(op["bytes"]))
            return ("comm", comm)
        m = _Message(self.sg, op)
        self.conn_queue.setdefault(key, []).append(m)
        if key not in self.conn_busy:
            self.conn_busy.add(key)
            self.sg.Actor.create(f"conn-{r}-{op['peer']}-{op['group']}", self.hosts[r], self._connection, key, last)
        return ("send", m)

    def _connection(self, key, travelling):
        """gloo writes a pair's messages on one connection in posting order: each starts (once its
        receiver has posted it) when the one before it has arrived."""
        src, dst, group = key
        if travelling is not None:
            travelling.wait()
        self.conn_last.pop(key, None)
        q = self.conn_queue[key]
        while q:
            m = q.pop(0)
            self.sg.Mailbox.by_name(f"{src}>{dst}|{group}|{m.tag}").put(m.id, m.nbytes)
            m.sem.release()
        self.conn_busy.discard(key)

    # -- collectives -------------------------------------------------------------------------------
    def _launch(self, r: int, op) -> _Collective:
        g = op["group"]
        seq = self.coll_seq.get((r, g), 0)
        self.coll_seq[(r, g)] = seq + 1
        key = (g, seq)
        c = self.colls.get(key)
        if c is None:
            c = self.colls[key] = _Collective(self.sg, g, self.groups[g], int(op["bytes"]))
        c.arrived += 1
        if c.arrived == len(c.members):
            del self.colls[key]
            self.queue[g].append(c)
            if self.running[g] < self.threads:
                self.running[g] += 1
                self.sg.Actor.create(f"ring-{g}-{seq}", self.hosts[c.members[0]], self._runner, g)
        return c

    def _runner(self, g: str):
        sg = self.sg
        while self.queue[g]:
            c = self.queue[g].pop(0)
            m = c.members
            n = len(m)
            rounds = ring_sends(c.nbytes, n)
            if self.ring == "merged":
                if len(rounds) > 1:
                    sg.this_actor.sleep_for((len(rounds) - 1) * self.route_latency)
                totals = [sum(rd[i] for rd in rounds) for i in range(n)]
                sg.Comm.wait_all([self._flow(m[i], m[(i + 1) % n], totals[i]) for i in range(n) if totals[i] > 0])
                self.messages += sum(1 for rd in rounds for x in rd if x > 0)
            else:
                for rd in rounds:
                    comms = [self._flow(m[i], m[(i + 1) % n], rd[i]) for i in range(n) if rd[i] > 0]
                    self.messages += len(comms)
                    if comms:
                        sg.Comm.wait_all(comms)
            c.done = True
            for _ in range(n):
                c.sem.release()
        self.running[g] -= 1

    def _flow(self, src: int, dst: int, nbytes: int):
        self.link_up[src] += nbytes
        self.link_down[dst] += nbytes
        return self.sg.Comm.sendto_async(self.hosts[src], self.hosts[dst], int(nbytes))


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 3:
        print("usage: python -m stanza_core.sim.executor PROGRAM.json PLATFORM.json OUT.json", file=sys.stderr)
        return 2
    doc = json.loads(Path(argv[0]).read_text())
    platform = json.loads(Path(argv[1]).read_text())
    try:
        out = Simulation(doc, platform).run()
    except SimUnavailable as e:
        print(f"error: {e}", file=sys.stderr)
        return 3
    Path(argv[2]).write_text(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
