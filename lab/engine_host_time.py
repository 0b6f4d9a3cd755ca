"""Host time of one engine `local` step against a plain PyTorch step, on the meta device.

    python lab/engine_host_time.py [STANZA_CHECKOUT] [--steps 15]

On the meta device every operator is dispatched and nothing is computed, so a step's time is
what the host spends issuing it: the part of a GPU step that the engine can add to. Per model
(AlexNet 64 px, ResNet-50 and VGG-16 32 px, batch 32), engine and plain steps alternate and
the medians are printed with their ratio. STANZA_CHECKOUT (default: this one) picks the
stanza_core measured, so two checkouts run the same probe (compare runs made one after the
other on a quiet machine). Measured, never modelled; the meta device's convolutions run Python
meta functions, so absolute times are no CUDA figure: the ratios are the point.
"""
import copy
import json
import statistics
import sys
import time
from pathlib import Path

args = [a for a in sys.argv[1:] if not a.startswith("--")]
steps = int(sys.argv[sys.argv.index("--steps") + 1]) if "--steps" in sys.argv else 15
if "--steps" in sys.argv:
    args = [a for a in args if a != str(steps)]
sys.path.insert(0, args[0] if args else str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from stanza_core import train  # noqa: E402
from stanza_core.comm import Comm  # noqa: E402
from stanza_core.engine.config import TrainConfig  # noqa: E402
from stanza_core import registry  # noqa: E402
from stanza_core.engine.batch import Batch, positions_of  # noqa: E402

for name, size, b in [("alexnet", 64, 32), ("resnet50", 32, 32), ("vgg16", 32, 32)]:
    cfg = TrainConfig(strategy="local", model=name, image_size=size, global_batch=b, num_classes=10, device="cpu",
                      steps=1000, quiet=True)
    prep = train.prepare(cfg)
    model = prep.model.to("meta")
    plain_model = copy.deepcopy(model)
    comm = Comm(0, 1)
    st = registry.get("local").engine_class()(model, cfg, prep.topo, comm, torch.device("meta"), None)
    x = torch.empty(b, 3, size, size, device="meta")
    y = torch.empty(b, dtype=torch.int64, device="meta")
    batch = Batch(x, y, positions_of(slice(0, b)))
    opt = torch.optim.SGD(plain_model.parameters(), lr=0.01, momentum=0.9)
    t = {"t": 0}

    def engine():
        with comm.counting():
            st.step(t["t"], batch)
        t["t"] += 1

    def plain():
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(plain_model(x), y).backward()
        opt.step()

    for f in (engine, plain, engine, plain):
        f()
    te, tp = [], []
    for _ in range(steps):
        for f, out in ((engine, te), (plain, tp)):
            t0 = time.perf_counter()
            f()
            out.append(time.perf_counter() - t0)
    row = {"model": name, "batch": b, "engine_ms": statistics.median(te) * 1e3, "plain_ms": statistics.median(tp) * 1e3}
    row["ratio"] = row["engine_ms"] / row["plain_ms"]
    print(json.dumps(row), flush=True)
