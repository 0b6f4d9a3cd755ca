"""One Stanza training run in plain torch.distributed: no engine, just the algorithm.

    torchrun --standalone --nproc-per-node 3 tutorials/t3_stanza_step.py --steps 2 --out DIR

Ranks 0..N-k-1 are CONV workers, ranks N-k..N-1 are FC workers (k = --fc-workers). Per step:
  CONV worker i: a = conv(x_i); send a, y_i to FC worker N-k + i % k; receive dL/da; backward;
                 allreduce the CONV gradients among the CONV workers; SGD step.
  FC worker j:   for each CONV worker it serves: receive a, y; loss = sum CE(fc(a), y) / G;
                 backward; send dL/da back. Allreduce the FC gradients among the FC workers
                 (if k > 1); SGD step.
Model, data, initial parameters and dropout masks are the engine's (stanza_core.models / data),
so the result can be compared with `python -m stanza_core.train --strategy stanza`.
Each rank writes DIR/rank<r>.pt: the parameters it trained (the model's names) and the bytes it sent.
"""
import argparse
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F

from stanza_core.data import batch_indices, open_dataset
from stanza_core.models import get_model, sample_keys
from stanza_core.split import split_model

ap = argparse.ArgumentParser()
ap.add_argument("--fc-workers", type=int, default=1)
ap.add_argument("--global-batch", type=int, default=6)
ap.add_argument("--steps", type=int, default=1)
ap.add_argument("--image-size", type=int, default=16)
ap.add_argument("--lr", type=float, default=0.01)
ap.add_argument("--momentum", type=float, default=0.9)
ap.add_argument("--seed", type=int, default=0)
ap.add_argument("--out", required=True)
args = ap.parse_args()

dist.init_process_group("gloo")  # torchrun sets RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
rank, N, k, G = dist.get_rank(), dist.get_world_size(), args.fc_workers, args.global_batch
nc = N - k  # CONV workers
b = G // nc  # samples per CONV worker
# Every rank creates every group, in the same order (a torch.distributed rule).
conv_group = dist.new_group(list(range(nc)))
fc_group = dist.new_group(list(range(nc, N)))

torch.manual_seed(args.seed)  # the same initial parameters on every rank
model = get_model("tiny_cnn", 10)
size = (3, args.image_size, args.image_size)
split = split_model(model, input_shape=size, batch_size=b)
with torch.no_grad():
    A = split.conv(torch.zeros(1, *size)).shape[1:]  # boundary shape per sample: (16, 4, 4)
part = split.conv if rank < nc else split.fc
opt = torch.optim.SGD(part.parameters(), lr=args.lr, momentum=args.momentum)
data = open_dataset("synthetic", args.image_size, 10, args.seed)
sent = {}  # category -> bytes this rank sent over all steps


def count(category, nbytes):
    sent[category] = sent.get(category, 0) + nbytes


def allreduce_grads(group, n, category):
    for p in part.parameters():  # one allreduce per tensor: simple, not fast (the engine buckets)
        dist.all_reduce(p.grad, group=group)
        count(category, 2 * (n - 1) * p.grad.numel() * 4 / n)  # what a ring moves per member


for t in range(args.steps):
    opt.zero_grad()
    if rank < nc:  # ---------------- CONV worker
        x, y = data.get(batch_indices(data, t, G, args.seed, slice(rank * b, (rank + 1) * b)))
        a = part(x)  # (b, *A)
        fc_rank = nc + rank % k  # the engine takes this from stanza_core.topology.fc_worker_of
        dist.send(a.detach(), fc_rank)
        dist.send(y, fc_rank)
        count("activations", a.numel() * 4)
        count("labels", y.numel() * 8)
        grad = torch.empty_like(a)
        dist.recv(grad, fc_rank)
        a.backward(grad)
        allreduce_grads(conv_group, nc, "conv_grads")
    else:  # ---------------------------- FC worker
        for i in range(rank - nc, nc, k):  # the CONV workers it serves, in rank order
            a, y = torch.empty(b, *A), torch.empty(b, dtype=torch.int64)
            dist.recv(a, i)
            dist.recv(y, i)
            a.requires_grad_(True)
            with sample_keys(args.seed, t, torch.arange(i * b, (i + 1) * b)):  # same dropout as local
                loss = F.cross_entropy(part(a), y, reduction="sum") / G  # this slice's share of the mean
            loss.backward()  # FC gradients accumulate over the served CONV workers
            dist.send(a.grad, i)
            count("activation_grads", a.grad.numel() * 4)
        if k > 1:
            allreduce_grads(fc_group, k, "fc_grads")
    opt.step()

mine = {id(p) for p in part.parameters()}
trained = {n: p.detach().clone() for n, p in model.named_parameters() if id(p) in mine}
os.makedirs(args.out, exist_ok=True)
torch.save({"rank": rank, "params": trained, "sent_per_step": {c: v / args.steps for c, v in sent.items()}},
           os.path.join(args.out, f"rank{rank}.pt"))
dist.destroy_process_group()
