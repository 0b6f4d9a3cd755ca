"""Traffic per training step (notebook 02): bytes counted by the engine beside the performance
model's bytes, for ps, ddp and stanza with k FC workers.

Every measured configuration is one real torchrun job on this machine (gloo over unshaped
loopback, `stanza_core.launch.run_job`); its metrics JSON holds what each rank's counters saw
per step, by category. The model's figures are `stanza_core.perf.expected_bytes` for the same
counts (CONV params Pc, FC params Pf, boundary values A) and the same global batch; the two
must be equal to the byte.

Small images, the paper's bytes: torchvision's AlexNet/VGG pool adaptively to 6x6 / 7x7 before
the FC head, so the head has the same parameters at any input size. With the cut placed after
that pool (boundary "flatten") the boundary is 9216 (AlexNet) / 25088 (VGG-16) values per
sample, as at 224x224, so every byte counted at 64x64 (32x32) is the byte a 224x224 run moves;
only compute shrinks.
"""
from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from typing import Any

from tqdm import tqdm

from .. import checks, registry
from ..anatomy import Profile, profile_model
from ..labels import config_key, config_label
from ..launch import run_job
from ..models import MIN_IMAGE_SIZE
from ..local_device import local_device
from ..perf import ModelCounts, expected_bytes, totals
from ..perf.profiles import shape_model
from ..topology import fc_worker_choices, global_batch_for
from ..variant import Variant

DEFAULT_IMAGE = 32  # smallest input of the zoo's VGGs (five max-pools); AlexNet needs 63
PAPER_MODEL = "vgg16"  # the paper's "up to 10x less data than PS" model
PAPER_RATIO = 10.0
RATIO_NODES = (2, 3, 4, 6, 8, 12, 16, 24, 32)


def image_size_for(model: str, image_size: int) -> int:
    """image_size, or (0) the smallest input the model takes that keeps the paper's bytes."""
    return image_size or (64 if MIN_IMAGE_SIZE.get(model, 1) > DEFAULT_IMAGE else DEFAULT_IMAGE)


def plan(models, nodes, fc_workers, *, per_worker: int = 32, steps: int = 3, image_size: int = 0,
         num_classes: int = 1000, boundary: str = "flatten", device: str = "cpu") -> list[dict[str, Any]]:
    """The configurations to measure, all parameters checked first (one-line ValueError).

    One job each of ps, ddp and stanza with every k in fc_workers, for every model and N; each
    job's global batch is per_worker x its data workers (topology), its name labels.config_label
    / config_key."""
    names = checks.model_names(models)
    ns = checks.int_list("nodes", nodes, 2, unique=True)
    ks = [checks.fc_workers_on_every(k, ns) for k in checks.int_list("fc_workers", fc_workers, 1, unique=True)]
    checks.positive_int("per_worker", per_worker)
    checks.positive_int("num_classes", num_classes)
    checks.positive_int("steps", steps, 2)  # the first step is warm-up
    checks.positive_int("image_size", image_size, 0)  # 0: automatic
    if not isinstance(boundary, str):
        raise ValueError(f"boundary must be a module name or '' (automatic), got {boundary!r}")
    checks.model_names(names, image_size or None)
    device = local_device(device)
    out = []
    for m in names:
        for n in ns:
            for strategy, k in [(s, None) for s in registry.baselines()] + [("stanza", k) for k in ks]:
                out.append({"key": f"{m}.n{n}.{config_key(strategy, k)}", "model": m, "nodes": n,
                            "strategy": strategy, "fc_workers": k, "label": config_label(strategy, k),
                            "global_batch": global_batch_for(Variant(strategy, fc_workers=k), n, per_worker),
                            "per_worker": per_worker,
                            "image_size": image_size_for(m, image_size), "num_classes": num_classes,
                            "boundary": boundary or None, "steps": steps, "device": device})
    return out


def model_profile(model: str, image_size: int, num_classes: int, per_worker: int, boundary: str | None) -> Profile:
    """The counts the engine's split sees: same model, input, per-worker batch and boundary."""
    return profile_model(shape_model(model, num_classes), (3, image_size, image_size), per_worker,
                         boundary=boundary, name=model)


def compare(measured: list[dict], expected: list[dict]) -> int:
    """Largest |measured - expected| bytes over every rank, direction and category (0: equal)."""
    if [r["rank"] for r in measured] != [r["rank"] for r in expected]:
        raise ValueError("measured and expected ranks differ")
    worst = 0
    for m, e in zip(measured, expected):
        if m["role"] != e["role"]:
            return max(worst, 1 << 62)  # a role mismatch is never "equal"
        for d in ("sent", "recv"):
            for c in set(m[d]) | set(e[d]):
                worst = max(worst, abs(m[d].get(c, 0) - e[d].get(c, 0)))
    return worst


def _node_summary(ranks: list[dict]) -> dict[str, Any]:
    """Cluster total (bytes sent) and, per role, the busiest rank's bytes (sent + received)."""
    per_role: dict[str, dict] = {}
    for r in ranks:
        moved = sum(r["sent"].values()) + sum(r["recv"].values())
        if r["role"] not in per_role or moved > per_role[r["role"]]["bytes"]:
            per_role[r["role"]] = {"rank": r["rank"], "bytes": moved, "sent": r["sent"], "recv": r["recv"]}
    t = totals(ranks)
    return {"bytes_per_step": t["bytes_per_step"], "max_node_bytes": max(v["bytes"] for v in per_role.values()),
            "max_node_sent": t["max_node_sent"], "max_node_recv": t["max_node_recv"], "roles": per_role}


def measure(configs: Sequence[dict], *, timeout_s: float = 1800,
            workdir: str | None = None) -> list[dict[str, Any]]:
    """Run every configuration as a torchrun job and put the model's bytes beside its counters."""
    profiles: dict[tuple, Profile] = {}
    rows = []
    with tempfile.TemporaryDirectory(prefix="stanza-traffic-") as tmp:
        for c in tqdm(configs, desc="traffic jobs", unit="job"):
            pkey = (c["model"], c["image_size"], c["num_classes"], c["per_worker"], c["boundary"])
            if pkey not in profiles:
                profiles[pkey] = model_profile(*pkey)
            counts = ModelCounts.of(profiles[pkey])
            job_dir = os.path.join(workdir or tmp, c["key"])
            m = run_job(c["nodes"], job_dir, timeout_s=timeout_s, strategy=c["strategy"], model=c["model"],
                        num_classes=c["num_classes"], image_size=c["image_size"], global_batch=c["global_batch"],
                        steps=c["steps"], warmup=1, fc_workers=c["fc_workers"], device=c["device"],
                        boundary=c["boundary"] if registry.get(c["strategy"]).split else None)
            measured = [{k: r[k] for k in ("rank", "role", "sent", "recv")} for r in m["ranks"]]
            expected = expected_bytes(counts, Variant.of_row(c), c["nodes"], global_batch=c["global_batch"])
            if m["bytes_per_step"] != totals(measured)["bytes_per_step"]:
                raise RuntimeError(f"{c['key']}: bytes_per_step is not the sum of the ranks' bytes sent")
            rows.append({**c, "counts": {"conv_params": counts.conv_params, "fc_params": counts.fc_params,
                                         "boundary_values": counts.boundary_values},
                         "measured": {**_node_summary(measured), "ranks": measured},
                         "model_bytes": {**_node_summary(expected), "ranks": expected},
                         "max_abs_diff_bytes": compare(measured, expected),
                         "step_time_median_s": m["step_time_median_s"], "device": m["config"]["device_type"]})
    return rows


def ratio_curve(counts: ModelCounts, nodes: Sequence[int] = RATIO_NODES, per_worker: int = 32,
                fc_workers: int = 1) -> dict[str, list]:
    """PS bytes over stanza bytes per step against N, from the model (k FC workers, the same
    samples per data worker): cluster totals and busiest node (max of sent, received)."""
    out: dict[str, list] = {"nodes": [], "total": [], "busiest": []}
    for n in nodes:
        if fc_workers not in fc_worker_choices(n):
            continue
        ps, stanza = Variant("ps"), Variant("stanza", fc_workers=fc_workers)
        ps = totals(expected_bytes(counts, ps, n, global_batch=global_batch_for(ps, n, per_worker)))
        st = totals(expected_bytes(counts, stanza, n, global_batch=global_batch_for(stanza, n, per_worker)))
        out["nodes"].append(n)
        out["total"].append(ps["bytes_per_step"] / st["bytes_per_step"])
        out["busiest"].append(max(ps["max_node_sent"], ps["max_node_recv"])
                              / max(st["max_node_sent"], st["max_node_recv"]))
    return out


def paper_model_curves(models: Sequence[str], per_worker: int = 32, nodes: Sequence[int] = RATIO_NODES,
                       num_classes: int = 1000) -> dict[str, dict]:
    """ratio_curve of each model (and always VGG-16, with 1000 classes unless it is in `models`)
    at the paper's boundary, k = 1, from counts taken at a small image with the cut after the
    adaptive pool: equal to the 224x224 counts."""
    out = {}
    classes = {m: num_classes for m in models}
    classes.setdefault(PAPER_MODEL, 1000)  # the paper's VGG-16: ImageNet's head, whatever the run's
    for m, c in classes.items():
        p = model_profile(m, image_size_for(m, 0), c, per_worker, "flatten")
        counts = ModelCounts.of(p)
        out[m] = {"num_classes": c, "counts": {"conv_params": counts.conv_params, "fc_params": counts.fc_params,
                             "boundary_values": counts.boundary_values},
                  **ratio_curve(counts, nodes, per_worker)}
        out[m]["by_nodes"] = {f"n{n}": {"total": t, "busiest": b}
                              for n, t, b in zip(out[m]["nodes"], out[m]["total"], out[m]["busiest"])}
        out[m]["ratio_vs_n"] = "; ".join(f"N={n}: {t:.1f}x ({b:.1f}x busiest node)"
                                         for n, t, b in zip(out[m]["nodes"], out[m]["total"], out[m]["busiest"]))
    return out


def results(rows: Sequence[dict], curves: dict[str, dict], params: dict[str, Any]) -> dict[str, Any]:
    """results.json of notebook 02. Claims point into `configs.<model>.n<N>.<config>` (bytes,
    PS/this ratios) and `paper_model.<model>.by_nodes.n<N>` (the model's ratio curves)."""
    configs: dict[str, dict] = {}
    for r in rows:
        ps = next(x for x in rows if (x["model"], x["nodes"]) == (r["model"], r["nodes"])
                  and registry.owns(x["strategy"], "ps_shards"))
        configs.setdefault(r["model"], {}).setdefault(f"n{r['nodes']}", {})[config_key(r["strategy"], r["fc_workers"])] = {
            "bytes_per_step": r["measured"]["bytes_per_step"],
            "model_bytes_per_step": r["model_bytes"]["bytes_per_step"],
            "max_node_bytes": r["measured"]["max_node_bytes"],
            "max_abs_diff_bytes": r["max_abs_diff_bytes"],
            "ps_over_this_total": ps["measured"]["bytes_per_step"] / r["measured"]["bytes_per_step"],
            "ps_over_this_busiest": ps["measured"]["max_node_bytes"] / r["measured"]["max_node_bytes"],
            "step_time_median_s": r["step_time_median_s"],
        }
    return {"experiment": "traffic", "params": dict(params), "runs": list(rows),
            "max_abs_diff_bytes": max((r["max_abs_diff_bytes"] for r in rows), default=0),
            "configs": configs, "paper_model": curves, "paper_ratio": PAPER_RATIO}
