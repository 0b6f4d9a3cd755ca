"""The split against every torchvision classification model (random init, never downloaded).

    python -m stanza_core.experiments.split_sweep            # markdown table (docs/models.md)

Each model is built with num_classes=10 at the smallest of SIZES it runs on (ViTs are built
for that size: their image_size is a constructor argument; GoogLeNet and Inception v3 without
their auxiliary classifiers, as the zoo builds them: with them, the split refuses). A model
either splits — fc(conv(x)) == model(x) in eval mode and the two parts' parameters add up to
the model's — or is refused with a SplitError saying why. `fc_heavy` marks cuts whose FC side
carries most of the forward FLOPs (the split's own note: not layer separation).
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import time

import torch

from ..split import SplitError, split_model

SIZES = (32, 64, 96, 128, 224)
# Built as the zoo builds them (see stanza_core.models): auxiliary heads off.
EXTRA_KWARGS = {"googlenet": {"aux_logits": False, "init_weights": True},
                "inception_v3": {"aux_logits": False, "init_weights": True}}


@dataclasses.dataclass
class SweepRow:
    name: str
    image_size: int | None  # smallest of SIZES the model runs on
    outcome: str  # "split" | "refused" | "no input size"
    boundary: str | None = None
    params: int = 0
    fc_flop_share: float | None = None
    fc_heavy: bool = False
    reason: str = ""  # SplitError message (refused) or the error at the largest size
    seconds: float = 0.0


def classification_models() -> list[str]:
    import torchvision.models as tvm  # torchvision: ~1000 more modules; zoo models only

    return sorted(tvm.list_models(module=tvm))


def build(name: str, image_size: int) -> torch.nn.Module:
    import torchvision.models as tvm  # torchvision: ~1000 more modules; zoo models only

    kwargs = dict(EXTRA_KWARGS.get(name, {}))
    if name.startswith("vit_"):
        kwargs["image_size"] = image_size
    return tvm.get_model(name, weights=None, num_classes=10, **kwargs)


def sweep_one(name: str, sizes=SIZES, batch: int = 2) -> SweepRow:
    """Build `name` at the first size it runs on, split it, check the split."""
    t0 = time.perf_counter()
    last = ""
    torch.manual_seed(0)
    for size in sizes:
        if name.startswith("vit_h_14") and size % 14:
            continue
        model = None  # the largest models hold ~2.5 GB: free one before building the next
        try:
            model = build(name, size).eval()
            x = torch.randn(batch, 3, size, size)
            with torch.no_grad():
                want = model(x)
        except Exception as e:  # too small for this model: try the next size
            last = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
            continue
        total = sum(p.numel() for p in model.parameters())
        try:
            s = split_model(model, input_shape=(3, size, size), batch_size=batch)
        except SplitError as e:
            return SweepRow(name, size, "refused", params=total, reason=str(e), seconds=time.perf_counter() - t0)
        with torch.no_grad():
            got = s.fc(s.conv(x))
        n_conv = sum(p.numel() for p in s.conv.parameters())
        n_fc = sum(p.numel() for p in s.fc.parameters())
        if n_conv + n_fc != total or not torch.allclose(got, want, rtol=1e-4, atol=1e-5):
            why = "parameters do not add up" if n_conv + n_fc != total else "fc(conv(x)) != model(x)"
            return SweepRow(name, size, "wrong", s.boundary, total, s.fc_flop_share, s.fc_compute_heavy, why,
                            time.perf_counter() - t0)
        return SweepRow(name, size, "split", s.boundary, total, s.fc_flop_share, s.fc_compute_heavy, "",
                        time.perf_counter() - t0)
    return SweepRow(name, None, "no input size", reason=last, seconds=time.perf_counter() - t0)


def markdown(rows: list[SweepRow]) -> str:
    out = ["| model | input | outcome | boundary | FC share of FLOPs | note |", "|---|---|---|---|---|---|"]
    for r in rows:
        share = f"{100 * r.fc_flop_share:.1f}%" if r.fc_flop_share is not None else ""
        note = "FC side compute-heavy: not layer separation" if r.fc_heavy else r.reason
        out.append(f"| {r.name} | {r.image_size or ''} | {r.outcome} | {r.boundary or ''} | {share} | {note} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m stanza_core.experiments.split_sweep",
                                 description="Split every torchvision classification model (or NAMES) and "
                                             "print a markdown table and a one-line summary.")
    ap.add_argument("names", nargs="*", metavar="NAME", help="torchvision model names (default: all of "
                    "torchvision.models.list_models(module=torchvision.models))")
    args = ap.parse_args(argv)
    unknown = sorted(set(args.names) - set(classification_models()))
    if unknown:
        print(f"error: not torchvision classification models: {', '.join(unknown)}", file=sys.stderr)
        return 2
    names = args.names or classification_models()
    rows = []
    for n in names:
        rows.append(sweep_one(n))
        print(f"{n}: {rows[-1].outcome} {rows[-1].seconds:.1f}s", file=sys.stderr, flush=True)
    print(markdown(rows))
    counts = {}
    for r in rows:
        counts[r.outcome] = counts.get(r.outcome, 0) + 1
    heavy = sum(r.fc_heavy for r in rows)
    print(f"\n{len(rows)} models: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
          + f"; {heavy} of the splits put most FLOPs on the FC side")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
