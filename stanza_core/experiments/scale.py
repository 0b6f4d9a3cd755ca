"""Notebook 10: layer separation beyond the paper's scale, simulated.

Stanza (the optimiser's k), the sharded parameter server (one shard colocated with every worker)
and ddp, AlexNet, VGG-16 and ResNet-50 at 224x224, 32 samples per data worker, from 4 to 1024
nodes at 10 / 25 / 100 / 400 Gb/s per node, on the V100 and H100 device rows:

  modelled    perf.best_assignment at every point (the analytic model; it picks stanza's k);
  simulated   the same configurations' programs (each strategy's schedule.py, equal to the
              engine's recorded program: tests/dist/test_schedules.py) timed on SimGrid
              (stanza_core.sim), compute from the device row, at sim.run.SIM_VERSION.

    p = ScaleParams(models=["vgg16"], devices=["v100"], target_gbps=[10.0], nodes=[4, 16])
    modelled = model_points(p)               # no simulation: the performance model only
    simulated = simulate_points(p, modelled, store)   # stored entries read, the rest simulated
    results = scale_results(p, modelled, simulated)   # results.json

Ring allreduces are simulated merged by default (sim/executor.py: each ring edge's 2(N-1) chunks
as one flow after their route latencies, the same bytes on every link): the expanded form's
2(N-1)N messages an allreduce make ResNet-50 (hundreds of small allreduces a step) cost minutes a
configuration from N = 32 (`ring: expanded` or `auto` to have them).

The sharded PS's program has N^2 messages a step (every worker to every shard and back); its
simulation's cost grows about as N^3 (VGG-16 at 100 Gb/s: 10 s at N = 128, 79 s at N = 256 on
the 2-core machine, benchmarks/results/sim_speed.json's command), so it is simulated up to
`ps_max_nodes` and modelled beyond. A point "pays" when the best stanza is faster than every
baseline of the same kind of figure at that point.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from pathlib import Path
from typing import Any

from .. import atomic, checks, registry
from ..perf import Cluster, best_assignment, check_device, named_profile
from ..runs.runconfig import UNSET_LINK_MBIT, RunConfig
from ..sim.cluster import RINGS
from ..sim.run import SIM_VERSION, available, simulate_bandwidths

BASELINES = registry.baselines()  # the configurations stanza is judged against
ROLES = ("stanza", *BASELINES)
CAPPED = {"ps"}  # simulated up to ps_max_nodes: its program has N^2 messages a step
IMAGE, CLASSES = 224, 1000
ROOT = Path(__file__).resolve().parents[2]
STORE = ROOT / "benchmarks" / "results" / "sim_scale"


@dataclasses.dataclass(kw_only=True)
class ScaleParams:
    """Notebook 10's parameters (its `parameters` cell), checked on creation."""

    models: list[str]  # zoo models (224x224, 1000 classes)
    devices: list[str]  # device rows of the compute (perf device names: v100, h100, ...)
    target_gbps: list[float]  # bandwidths per node and direction (Gb/s)
    nodes: list[int]  # cluster sizes
    batch_per_worker: int = 32  # samples per data worker
    ps_max_nodes: int = 128  # the sharded PS simulated up to this N (modelled beyond)
    ring: str = "merged"  # ring allreduce in the simulation: merged (one flow per ring edge), expanded or auto
    simulate: bool = True  # False: the modelled figures only

    def __post_init__(self):
        self.models = checks.model_names(self.models, IMAGE, name="models")
        if not self.devices:
            raise ValueError("devices must name at least one device row (v100, h100, ...)")
        for d in self.devices:
            check_device(d, "devices")
        self.target_gbps = checks.positive_floats("target_gbps", self.target_gbps)
        self.nodes = checks.int_list("nodes", self.nodes, 2)
        checks.positive_int("batch_per_worker", self.batch_per_worker)
        checks.positive_int("ps_max_nodes", self.ps_max_nodes, 2)
        if self.ring not in RINGS:
            raise ValueError(f"ring must be one of {', '.join(RINGS)}, got {self.ring!r}")


def _row(pred) -> dict[str, Any]:
    return {"label": pred.label, "strategy": pred.strategy, "variant": pred.variant,
            "global_batch": pred.global_batch, "throughput": pred.throughput}


def model_points(p: ScaleParams) -> dict[str, Any]:
    """perf.best_assignment at every point: each role's configuration and prediction, the pick."""
    out: dict[str, Any] = {}
    for m in p.models:
        prof = named_profile(m, IMAGE, CLASSES)
        for d in p.devices:
            for n in p.nodes:
                for g in p.target_gbps:
                    a = best_assignment(prof, Cluster(n, g, device=d), batch_per_worker=p.batch_per_worker)
                    out[(m, d, n, g)] = {"roles": {"stanza": _row(a.best_stanza()), "ps": _row(a.ps),
                                                   "ddp": _row(a.ddp)}, "pick": a.best.label}
    return out


def _entry_name(m: str, d: str, n: int, label: str, batch: int, g: float, ring: str) -> str:
    slug = label.replace(" ", "_").replace("=", "")
    digest = hashlib.sha1(f"{m}|{d}|{n}|{label}|{batch}|{g!r}|{ring}".encode()).hexdigest()[:8]
    return f"{m}-{d}-n{n}-{slug}-{g:g}g-{digest}.json"


def _key(m, d, n, row, g, ring) -> dict[str, Any]:
    return {"model": m, "device": d, "nodes": n, "label": row["label"], "global_batch": row["global_batch"],
            "target_gbps": g, "image_size": IMAGE, "num_classes": CLASSES, "ring": ring}


def read_entry(store: Path | None, key: dict[str, Any]) -> dict[str, Any] | None:
    """The stored simulated entry of `key` at the current simulator version, else None."""
    if store is None:
        return None
    path = store / _entry_name(key["model"], key["device"], key["nodes"], key["label"], key["global_batch"],
                               key["target_gbps"], key["ring"])
    if not path.is_file():
        return None
    e = json.loads(path.read_text())
    return e if e.get("sim_version") == SIM_VERSION and e.get("key") == key else None


def simulated_roles(p: ScaleParams, n: int) -> tuple[str, ...]:
    return tuple(r for r in ROLES if n <= p.ps_max_nodes or r not in CAPPED)


def simulate_points(p: ScaleParams, modelled: dict[str, Any], store: Path | None, *, say=print,
                    only_stored: bool = False) -> dict[str, Any]:
    """Every point's roles simulated (stored entries of this simulator version read, the rest
    simulated and stored; only_stored: read only): {(model, device, n, gbps, role): entry}. A
    configuration's program is generated once for all the bandwidths that share it."""
    out: dict[tuple, dict[str, Any]] = {}
    if not p.simulate:
        return out
    todo: dict[tuple, list[float]] = {}
    rows: dict[tuple, dict[str, Any]] = {}
    for (m, d, n, g), pt in modelled.items():
        for role in simulated_roles(p, n):
            row = pt["roles"][role]
            key = _key(m, d, n, row, g, p.ring)
            if (e := read_entry(store, key)) is not None:
                out[(m, d, n, g, role)] = e
                continue
            cfg = (m, d, n, row["label"], row["global_batch"])
            todo.setdefault(cfg, []).append((g, role))
            rows[cfg] = row
    if only_stored:
        return out
    t0 = time.monotonic()
    for i, (cfg, wants) in enumerate(sorted(todo.items(), key=lambda kv: kv[0][2]), 1):
        m, d, n, label, batch = cfg
        row = rows[cfg]
        rc = RunConfig(model=m, image_size=IMAGE, num_classes=CLASSES, nodes=n, variant=row["variant"],
                       global_batch=batch, steps=2, warmup=1, link_mbit=UNSET_LINK_MBIT, compute="replay",
                       replay_device=d)
        gbps = sorted({g for g, _ in wants})
        t = time.monotonic()
        sims = dict(zip(gbps, simulate_bandwidths(rc, gbps, ring=p.ring)))
        wall = (time.monotonic() - t) / len(gbps)
        for g, role in wants:
            s = sims[g]
            e = {"figure": "simulated", "sim_version": SIM_VERSION, "key": _key(m, d, n, row, g, p.ring),
                 "device_row": s["device_row"], "step_s": s["step_s"], "throughput": s["throughput"],
                 "bytes_per_step": s["bytes_per_step"], "messages_per_step": s["messages_per_step"],
                 "ring": s["platform"]["ring"], "wall_s": wall}
            out[(m, d, n, g, role)] = e
            if store is not None:
                store.mkdir(parents=True, exist_ok=True)
                atomic.write_text(store / _entry_name(m, d, n, label, batch, g, p.ring), json.dumps(e, indent=1) + "\n")
        say(f"[{i}/{len(todo)}] {m} {d} N={n} {label} at {', '.join(f'{g:g}' for g in gbps)} Gb/s: "
            f"{wall * len(gbps):.1f} s (total {time.monotonic() - t0:.0f} s)")
    return out


def store_dir(store: str) -> Path | None:
    """The notebook's `store` parameter: "auto" the committed store, "" none, else a folder."""
    if store == "auto":
        return STORE
    return Path(store) if store else None


def simulate_or_say(p: ScaleParams, modelled: dict[str, Any], store: Path | None) -> tuple[dict, str | None]:
    """simulate_points, or ({}, why not) where SimGrid is missing or simulate=False (the entries
    already stored at this simulator version are still read)."""
    if not p.simulate:
        return {}, "simulate=False"
    if reason := available():
        stored = simulate_points(dataclasses.replace(p, simulate=True), modelled, store, only_stored=True)
        return stored, reason
    return simulate_points(p, modelled, store), None


def _fastest(vals: dict[str, float | None]) -> str | None:
    have = {k: v for k, v in vals.items() if v is not None}
    return max(have, key=have.get) if have else None


def scale_results(p: ScaleParams, modelled: dict[str, Any], simulated: dict[tuple, dict[str, Any]],
                  not_simulated: str | None = None) -> dict[str, Any]:
    """results.json: per model, device, N and bandwidth, each role's modelled and simulated
    samples/s, stanza's k, the fastest of each kind, and whether layer separation pays."""
    by: dict[str, Any] = {}
    for (m, d, n, g), pt in modelled.items():
        mod = {r: pt["roles"][r]["throughput"] for r in ROLES}
        sim = {r: (simulated[(m, d, n, g, r)]["throughput"] if (m, d, n, g, r) in simulated else None) for r in ROLES}
        base_sim = [sim[r] for r in BASELINES if sim[r] is not None]
        cell = {"k": pt["roles"]["stanza"]["variant"].options.values().get("fc_workers"),
                "labels": {r: pt["roles"][r]["label"] for r in ROLES},
                "global_batch": {r: pt["roles"][r]["global_batch"] for r in ROLES},
                "modelled": mod, "simulated": sim, "modelled_pick": pt["pick"],
                "modelled_fastest": _fastest(mod), "simulated_fastest": _fastest(sim) if sim["stanza"] else None,
                "modelled_stanza_over_best_baseline": mod["stanza"] / max(mod[r] for r in BASELINES),
                "simulated_stanza_over_best_baseline": (sim["stanza"] / max(base_sim)
                                                        if sim["stanza"] and base_sim else None),
                "simulated_baselines": [r for r in BASELINES if sim[r] is not None],
                "simulated_over_modelled": {r: (sim[r] / mod[r] if sim[r] else None) for r in ROLES}}
        cell["modelled_pays"] = cell["modelled_stanza_over_best_baseline"] > 1
        s = cell["simulated_stanza_over_best_baseline"]
        cell["simulated_pays"] = None if s is None else s > 1
        by.setdefault(m, {}).setdefault(d, {}).setdefault(str(n), {})[f"{g:g}"] = cell
    cells = [c for dd in by.values() for nn in dd.values() for gg in nn.values() for c in gg.values()]
    judged = [c for c in cells if c["simulated_pays"] is not None]
    agree = [c for c in judged if c["simulated_pays"] == c["modelled_pays"]]
    ratios = sorted(abs(r - 1) for c in cells for r in c["simulated_over_modelled"].values() if r is not None)
    return {"source": {"modelled": "modelled (perf.best_assignment, the device rows)",
                       "simulated": f"simulated (SimGrid, sim version {SIM_VERSION}, compute from the device rows)"},
            "sim_version": SIM_VERSION, "models": p.models, "devices": p.devices, "nodes": p.nodes,
            "target_gbps": p.target_gbps, "batch_per_worker": p.batch_per_worker, "ps_max_nodes": p.ps_max_nodes,
            "ring": p.ring,
            "simulated_count": len(simulated), "not_simulated": not_simulated, "by_model": by,
            "summary": {"points": len(cells), "judged": len(judged), "pays_simulated": sum(c["simulated_pays"] for c in judged),
                        "model_agrees_on_pays": len(agree),
                        "median_model_gap": ratios[len(ratios) // 2] if ratios else None,
                        "worst_model_gap": ratios[-1] if ratios else None,
                        "simulation_s": sum(e["wall_s"] for e in simulated.values())}}


def conclusion(results: dict[str, Any]) -> str:
    """What the figures show, in sentences built from results.json."""
    s = results["summary"]
    if not s["judged"]:
        return (f"{s['points']} points modelled; none simulated ({results['not_simulated'] or 'none asked'}), so "
                "no simulated figure is drawn.")
    lines = [f"Simulated: layer separation pays (the best stanza is faster than every simulated baseline) at "
             f"{s['pays_simulated']} of {s['judged']} points; the analytic model says the same at "
             f"{s['model_agrees_on_pays']} of them."]
    if s["median_model_gap"] is not None:
        lines.append(f"Simulated against modelled samples/s, over every simulated configuration: median "
                     f"|simulated / modelled - 1| = {s['median_model_gap']:.1%}, worst {s['worst_model_gap']:.1%}.")
    for m, dd in results["by_model"].items():
        for d, nn in dd.items():
            pays = [(int(n), float(g)) for n, gg in nn.items() for g, c in gg.items() if c["simulated_pays"]]
            if pays:
                lines.append(f"{m} on {d}: pays from N = {min(n for n, _ in pays)} to {max(n for n, _ in pays)} "
                             f"(at {', '.join(sorted({f'{g:g}' for _, g in pays}, key=float))} Gb/s).")
            else:
                lines.append(f"{m} on {d}: never pays among the simulated points.")
    if any(int(n) > results["ps_max_nodes"] for n in results["nodes"]):
        lines.append(f"Above N = {results['ps_max_nodes']} the sharded PS is modelled only, so the simulated "
                     "judgement there compares stanza with ddp.")
    return "\n".join(lines)
