"""Convergence (notebook 06): loss and accuracy against steps and wall time on scikit-learn's
digits, the same global batches under local, ps, ddp and stanza.

Each strategy trains as one real job (`stanza_core.launch.run_job`: torchrun, gloo over
loopback) that saves the full model after every `eval_every`-th step (`--save-every`, outside the
steps' time) and at the end; the accuracy of each saved model is then measured here.

Held-out samples: the engine's stream walks a seeded permutation of all 1797 digits, so the
samples of steps 0..T-1 are known in advance (`stanza_core.data.batch_indices`). Those never
drawn in the whole run are held out; with G x T >= 1797 there are none, and only the accuracy
on all digits (the training distribution) is reported.

Wall time is training time: the sum of the steps' times (slowest rank each step); job start-up,
saving and evaluation are left out.

Beyond the paper (VARIANTS, listed among `strategies` like the others): stanza with hybrid FC
workers and micro-batches (exact: it must equal local like stanza), and stanza with each
opt-in compression (bf16 boundary, fp16 / PowerSGD CONV gradients: not exact), so each option's
loss is seen against exact training over the whole run.
"""
from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Sequence
from typing import Any

import torch
from tqdm import tqdm

from .. import checks, registry
from ..engine.config import step_save_path
from ..data import batch_indices, open_dataset
from ..labels import config_label
from ..launch import run_job
from ..models import get_model
from ..topology import make_topology
from ..local_device import local_device
from ..perf.optimize import share_grid
from ..variant import Variant

# stanza variants: name -> engine options (fc_conv_share "max": the largest share share_grid allows)
VARIANTS = {
    "stanza_hybrid_m2": {"fc_conv_share": "max", "micro_batches": 2},  # exact
    "stanza_bf16": {"boundary_dtype": "bf16"},
    "stanza_fp16_grads": {"grad_compression": "fp16"},
    "stanza_powersgd": {"grad_compression": "powersgd"},
}
DATASET = "digits"
EVAL_BATCH = 512
GAP = 1e-4  # a loss difference from local above this is more than float summation order
# The exactness window: the losses of steps 0..EXACT_WINDOW-1, which no max-pool near-tie flipped
# by float order has reached yet. Measured (benchmarks/convergence_spread.py, quick configuration):
# the first flip at step 5, so steps 0..5; step 5's loss is computed before its gradient. Inside it
# an exact run stays within about an ulp of local's loss; after it, luck decides how far float
# order is amplified (2.2e-2 over 60 steps on this trajectory, 4.7e-2 on one of b7eb135's).
EXACT_WINDOW = 6
SAFETY = 10  # the exactness bound: SAFETY x the largest float-order spread measured in the window


def max_loss_diff(losses: Sequence[float], ref: Sequence[float], steps: int | None = None) -> float:
    """Largest |loss - ref| over the first `steps` steps (None: all of them)."""
    return max(abs(a - b) for a, b in list(zip(losses, ref))[:steps])


def round_up(x: float) -> float:
    """x rounded up to one significant digit (2.98e-6 -> 3e-6, 2.18e-2 -> 3e-2)."""
    e = math.floor(math.log10(x))
    return float(f"{math.ceil(round(x / 10**e, 9))}e{e}")  # ceil(2.98) = 3, ceil(3.0000000001) = 3


def exact_bound(spreads: dict[str, float]) -> float:
    """The exactness bound from float-order spreads (name -> max_loss_diff over the window) of runs
    that differ from single-process SGD only in summation order, never of the runs it judges:
    SAFETY x the largest, rounded up to one significant digit (2.98e-7 -> 3e-6)."""
    return round_up(SAFETY * max(spreads.values()))


def envelope_bound(spreads: dict[str, float]) -> float:
    """The whole-run envelope from the same float-order runs' largest difference over all steps:
    rounded up to one digit, no safety factor (2.18e-2 -> 3e-2)."""
    return round_up(max(spreads.values()))


def plan(*, model: str = "tiny_cnn", nodes: int = 3, fc_workers: int = 1, global_batch: int = 24, steps: int = 60,
         eval_every: int = 0, image_size: int = 32, lr: float = 0.05, momentum: float = 0.5, seed: int = 0,
         strategies: Sequence[str] | None = None, device: str = "cpu") -> dict[str, Any]:
    """The run, every parameter checked (one-line ValueError). eval_every 0: only at the end.
    `jobs` holds each strategy's job resolved once (job_of): what _train_one launches."""
    checks.model_fits(model, image_size)
    for name, v, low in (("nodes", nodes, 2), ("fc_workers", fc_workers, 1), ("global_batch", global_batch, 1),
                         ("steps", steps, 1), ("eval_every", eval_every, 0), ("image_size", image_size, 1)):
        checks.positive_int(name, v, low)
    checks.fc_workers(fc_workers, nodes)
    known = registry.names()  # every registered strategy (local first), then stanza's variants
    strategies = known if strategies is None else strategies
    names = [s.strip() for s in strategies.split(",")] if isinstance(strategies, str) else list(strategies)
    bad = [s for s in names if s not in known and s not in VARIANTS]
    if bad or not names or len(set(names)) != len(names):
        raise ValueError(f"strategies must be distinct names from {', '.join(known + tuple(VARIANTS))}, "
                         f"got {strategies!r}")
    oracle = registry.oracle()
    if oracle not in names:
        raise ValueError(f"strategies must include {oracle}: it is the reference the others are compared with")
    for s in names:  # the data workers of each run by topology (local: one process)
        if s != oracle:
            strategy = "stanza" if s in VARIANTS else s
            checks.batch_divides(global_batch, strategy, nodes,
                                 fc_workers if registry.owns(strategy, "fc_workers") else 0)
    paper = Variant("stanza", fc_workers=fc_workers)  # the notebook's k, once a Variant
    options = {s: variant_options(s, nodes, paper, global_batch) for s in names if s in VARIANTS}
    if not (isinstance(lr, (int, float)) and lr > 0) or not (isinstance(momentum, (int, float)) and 0 <= momentum < 1):
        raise ValueError(f"lr must be > 0 and momentum in [0, 1), got lr={lr!r}, momentum={momentum!r}")
    every = eval_every or steps
    ends = list(range(every, steps, every)) + [steps]
    return {"model": model, "nodes": nodes, "fc_workers": fc_workers, "global_batch": global_batch, "steps": steps,
            "eval_steps": ends, "image_size": image_size, "num_classes": 10, "lr": float(lr),
            "momentum": float(momentum), "seed": seed, "strategies": names, "device": local_device(device),
            "dataset": DATASET, "options": options,
            "jobs": {s: job_of(s, job_variant(s, paper, options.get(s, {})), nodes, global_batch) for s in names}}


def job_variant(name: str, paper: Variant, options: dict[str, Any]) -> Variant:
    """The Variant a strategy's job runs: a stanza variant's options on the paper's k, stanza's k,
    or the strategy alone."""
    strategy = "stanza" if name in VARIANTS else name
    k = paper.options.fc_workers if registry.owns(strategy, "fc_workers") and registry.get(strategy).compared else None
    return Variant.parse(strategy, {"fc_workers": k, **options})


def job_of(name: str, variant: Variant, nodes: int, global_batch: int) -> dict[str, Any]:
    """One strategy's job, resolved once: the engine's strategy and options (a stanza variant's,
    VARIANTS), its ranks (local: one process) and k (stanza, else None), its label and its batches
    per role (topology)."""
    strategy = variant.strategy
    options = {o: v for o, v in variant.options.values().items() if o in VARIANTS.get(name, {})}
    n = nodes if registry.get(strategy).compared else 1
    k = variant.get("fc_workers", 0) if n > 1 else 0
    topo = make_topology(variant, n, global_batch)
    return {"strategy": strategy, "options": options, "nodes": n, "fc_workers": k or None,
            "label": config_label(strategy, k, **options), "batch_per_worker": topo.worker_batch(global_batch),
            "fc_batch": topo.fc_batch}


def variant_options(name: str, nodes: int, paper: Variant, global_batch: int) -> dict[str, Any]:
    """The engine options of a stanza variant for this cluster and batch on the paper's stanza
    `paper` (its k) (one-line ValueError when the batch leaves no share of whole samples for a
    hybrid FC worker)."""
    opts = dict(VARIANTS[name])
    if opts.get("fc_conv_share") == "max":
        shares = [x for x in share_grid(global_batch, nodes, paper) if x > 0]
        if not shares:
            raise ValueError(f"{name}: global_batch {global_batch} gives an FC worker no share of whole samples "
                             f"on {nodes} nodes with k = {paper.options.fc_workers}")
        opts["fc_conv_share"] = shares[-1]
    return opts


def heldout_indices(p: dict[str, Any]) -> tuple[list[int], int]:
    """(indices of the digits never drawn in steps 0..T-1, dataset size)."""
    ds = open_dataset(DATASET, p["image_size"], p["num_classes"], p["seed"])
    seen = {i for t in range(p["steps"]) for i in batch_indices(ds, t, p["global_batch"], p["seed"],
                                                               slice(0, p["global_batch"]))}
    return [i for i in range(ds.size) if i not in seen], ds.size


def accuracy(model_name: str, state_path: str, image_size: int, num_classes: int = 10,
             indices: Sequence[int] | None = None, seed: int = 0) -> float:
    """Top-1 accuracy (eval mode: dropout off) of a saved full-model state_dict on digits
    (all samples, or `indices`), with the training stream's preprocessing."""
    ds = open_dataset(DATASET, image_size, num_classes, seed)
    idx = list(range(ds.size)) if indices is None else list(indices)
    if not idx:
        raise ValueError("accuracy needs at least one sample")
    net = get_model(model_name, num_classes)
    net.load_state_dict(torch.load(state_path, map_location="cpu", weights_only=True))
    net.eval()
    correct = 0
    with torch.no_grad():
        for s in range(0, len(idx), EVAL_BATCH):
            x, y = ds.get(idx[s:s + EVAL_BATCH])
            correct += int((net(x).argmax(1) == y).sum())
    return correct / len(idx)


def _train_one(p: dict[str, Any], name: str, work: str, heldout: list[int]) -> dict[str, Any]:
    job = p["jobs"][name]
    nodes, options, strategy, k = job["nodes"], job["options"], job["strategy"], job["fc_workers"]
    ends = p["eval_steps"]
    save = os.path.join(work, name, "model.pt")
    every = ends[0] if len(ends) > 1 else 0  # the full model after every eval_every-th step, then the last
    m = run_job(nodes, os.path.join(work, name), strategy=strategy, model=p["model"],
                num_classes=p["num_classes"], image_size=p["image_size"], global_batch=p["global_batch"],
                steps=p["steps"], lr=p["lr"], momentum=p["momentum"], seed=p["seed"], dataset=DATASET,
                fc_workers=k, device=p["device"],
                save=save, save_every=every or None, metrics=os.path.join(work, name, "metrics.json"), **options)
    if [s["step"] for s in m["steps"]] != list(range(p["steps"])):
        raise RuntimeError(f"{strategy}: reported steps {[s['step'] for s in m['steps']]}, expected 0..{p['steps'] - 1}")
    steps = [{"step": s["step"], "loss": s["loss"], "time_s": s["time_s"]} for s in m["steps"]]
    evals = []
    for end in ends:
        path = save if end == p["steps"] else step_save_path(save, end)
        evals.append({"step": end, "wall_s": sum(s["time_s"] for s in steps[:end]),
                      "accuracy_all": accuracy(p["model"], path, p["image_size"], p["num_classes"], seed=p["seed"]),
                      "accuracy_heldout": accuracy(p["model"], path, p["image_size"], p["num_classes"], heldout,
                                                   p["seed"]) if heldout else None})
        os.remove(path)  # VGG-sized models would fill the disk over many evaluations
    wall = 0.0
    for s in steps:
        wall += s["time_s"]
        s["wall_s"] = wall
    return {"strategy": strategy, "options": options, "nodes": nodes, "fc_workers": k, "label": job["label"],
            "steps": steps, "evals": evals, "final_loss": steps[-1]["loss"], "final_accuracy": evals[-1]["accuracy_all"],
            "final_accuracy_heldout": evals[-1]["accuracy_heldout"], "train_time_s": wall,
            "step_time_median_s": m["step_time_median_s"]}


def train_all(p: dict[str, Any], workdir: str | None = None) -> dict[str, dict]:
    """Every strategy of the plan, each in its own folder (local first: the reference)."""
    heldout, _ = heldout_indices(p)
    out = {}
    with tempfile.TemporaryDirectory(prefix="stanza-convergence-") as tmp:
        for s in tqdm(p["strategies"], desc="strategies", unit="run"):
            out[s] = _train_one(p, s, workdir or tmp, heldout)
    return out


def results(p: dict[str, Any], runs: dict[str, dict]) -> dict[str, Any]:
    """results.json of notebook 06: per strategy the curves, final loss/accuracy, the largest
    |loss - local loss| over all steps (`strategies.<name>.max_loss_diff_vs_local`) and over the
    exactness window (`max_loss_diff_vs_local_window`, the first EXACT_WINDOW steps), and the first
    step where it exceeds GAP (None: never)."""
    heldout, size = heldout_indices(p)
    ref = [s["loss"] for s in runs["local"]["steps"]]
    out = {}
    for name, r in runs.items():
        losses = [s["loss"] for s in r["steps"]]
        gaps = [abs(a - b) for a, b in zip(losses, ref)]
        diff = max(gaps)
        # float-order noise (~1e-7) grows as training amplifies it: where it first shows
        first_gap = next((s["step"] for s, g in zip(r["steps"], gaps) if g > GAP), None)
        acc_diff = max(abs(e["accuracy_all"] - l["accuracy_all"]) for e, l in zip(r["evals"], runs["local"]["evals"]))
        out[name] = {**r, "max_loss_diff_vs_local": diff, "max_accuracy_diff_vs_local": acc_diff,
                     "max_loss_diff_vs_local_window": max_loss_diff(losses, ref, EXACT_WINDOW),
                     "first_step_loss_gap_above": first_gap}
    others = [v for k, v in out.items() if k != registry.oracle()]
    return {"experiment": "convergence", "params": p, "loss_gap": GAP, "exact_window": EXACT_WINDOW,
            "dataset_size": size, "heldout_size": len(heldout),
            "chance_accuracy": 1 / p["num_classes"], "strategies": out,
            "max_loss_diff_vs_local": max((v["max_loss_diff_vs_local"] for v in others), default=0.0),
            "initial_loss": ref[0], "final_loss_local": ref[-1],
            "final_accuracy_local": runs["local"]["final_accuracy"]}
