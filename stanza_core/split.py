"""Split a CNN into a CONV body and an FC head at a single-tensor cut.

`split_model(model)` returns `SplitModel(conv, fc, boundary)` with `fc(conv(x)) == model(x)`
exactly: both parts run the model's own modules (shared objects, not copies) in the model's
own order, so every parameter and buffer lives in exactly one part, under its original name.

An nn.Sequential is cut between two children. Any other model is traced with torch.fx; a cut
after node i of the graph is valid when exactly one value computed up to node i is used after
it (a single tensor crosses) and no module or attribute is used on both sides.

Automatic boundary (boundary=None). Among the valid cuts whose FC side holds parameters and no
convolution, pick the one that minimises the bytes a CONV worker moves per step under layer
separation at `batch_size` samples:

    bytes(cut) = 2 * batch_size * A(cut) * 4  +  2 * 2 * P_conv(cut) * 4

counting both directions of the CONV worker's link for both terms (A: boundary values per
sample, sent forward as activations and received back as their gradients; P_conv: parameters on
the CONV side, allreduced each step: a ring member sends 2 (n-1)/n * 4 P_conv bytes and receives
as much, taken at its large-n value 2 * 4 P_conv each way). Ties go to the earliest cut. For AlexNet/VGG this is the cut between
`features` and the rest (boundary `avgpool`), for ResNet the cut after global pooling
(boundary `flatten`, FC side `fc`).
"""
from __future__ import annotations

import dataclasses

import torch
import torch.fx as fx
import torch.nn as nn

from .models import SampleDropout

_CONV_TYPES = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)


class SplitError(ValueError):
    """The model has no valid CONV|FC cut (message: one line naming the model and the reason)."""


@dataclasses.dataclass
class SplitModel:
    conv: nn.Module  # input images (B, C, H, W) -> boundary activations
    fc: nn.Module  # boundary activations -> logits (B, num_classes)
    boundary: str  # name of the first FC-side module (or graph node)
    boundary_shape: tuple[int, ...] | None = None  # per-sample shape of the boundary tensor (probed)
    conv_flops: float | None = None  # forward FLOPs per sample of each part (probed, eval mode)
    fc_flops: float | None = None
    notes: list[str] = dataclasses.field(default_factory=list)  # what a user must know about this cut

    @property
    def fc_flop_share(self) -> float | None:
        """Share of the forward FLOPs on the FC side (None if not probed or no FLOPs counted)."""
        if self.conv_flops is None or self.fc_flops is None or self.conv_flops + self.fc_flops == 0:
            return None
        return self.fc_flops / (self.conv_flops + self.fc_flops)

    @property
    def fc_compute_heavy(self) -> bool:
        """True when the FC side carries most of the compute: not layer separation in the
        paper's sense (e.g. a ViT cut after its patch embedding, the encoder on the "FC" side)."""
        share = self.fc_flop_share
        return share is not None and share > 0.5

    def release(self, part: str) -> None:
        """Free the storage of one part ("conv" or "fc"): its parameters and buffers become meta
        tensors (shape and dtype kept, no memory) in place, so the model and the other part are
        untouched. For a rank that never computes that part (a stanza CONV worker's FC head).
        In place means the same tensor objects (torch.utils.swap_tensors, not Module.to, which
        makes new ones): a traced part can hold a parameter itself (a get_attr node) beside the
        model's module, and both must see it released."""
        for t in [*getattr(self, part).parameters(), *getattr(self, part).buffers()]:
            meta = torch.empty_like(t, device="meta")
            torch.utils.swap_tensors(t, nn.Parameter(meta, t.requires_grad) if isinstance(t, nn.Parameter) else meta)

    def conv_param_names(self) -> list[str]:
        return [n for n, _ in self.conv.named_parameters()]

    def fc_param_names(self) -> list[str]:
        return [n for n, _ in self.fc.named_parameters()]


@dataclasses.dataclass
class _Cut:
    index: int  # cut after this many units (children or graph nodes)
    boundary: str
    conv_params: int
    fc_params: int
    fc_has_conv: bool


class _Tracer(fx.Tracer):
    def is_leaf_module(self, m: nn.Module, qualname: str) -> bool:
        return isinstance(m, SampleDropout) or super().is_leaf_module(m, qualname)


def _nparams(modules) -> int:
    seen, n = set(), 0
    for m in modules:
        for p in m.parameters():
            if id(p) not in seen:
                seen.add(id(p))
                n += p.numel()
    return n


def _has_conv(modules) -> bool:
    return any(isinstance(s, _CONV_TYPES) for m in modules for s in m.modules())


def module_device(module: nn.Module) -> torch.device:
    """Where `module` lives: the device of its first parameter or buffer (CPU if it has none)."""
    for t in (*module.parameters(), *module.buffers()):
        return t.device
    return torch.device("cpu")


def _boundary_values(model: nn.Module, cuts: list[_Cut], run_prefix, input_shape) -> list[int]:
    """Boundary size per sample of each cut, from one forward pass on a 1-sample input (eval
    mode, on the model's device: BatchNorm running statistics are left untouched)."""
    x = torch.zeros((1, *input_shape), device=module_device(model))
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            return [run_prefix(c.index, x).numel() for c in cuts]
    finally:
        model.train(was_training)


def _choose(model_name: str, cuts: list[_Cut], boundary: str | None, sizes_fn, batch_size: int) -> _Cut:
    if boundary is not None:
        for c in cuts:
            if c.boundary == boundary:
                if c.fc_params == 0:
                    raise SplitError(f"{model_name}: boundary {boundary!r} leaves no parameters on the FC side")
                return c
        names = ", ".join(c.boundary for c in cuts if c.fc_params > 0) or "none"
        raise SplitError(f"{model_name}: {boundary!r} is not a single-tensor cut; valid boundaries: {names}")
    candidates = [c for c in cuts if c.fc_params > 0 and c.conv_params > 0 and not c.fc_has_conv]
    if not candidates:
        raise SplitError(
            f"{model_name}: no single-tensor cut has parameters on both sides and no convolution after it"
        )
    sizes = sizes_fn(candidates)
    # both directions: activations out + gradients back; the ring's sent + received share
    cost = [2 * batch_size * a * 4 + 2 * 2 * c.conv_params * 4 for c, a in zip(candidates, sizes)]
    return candidates[cost.index(min(cost))]


def _split_sequential(model: nn.Sequential, boundary, input_shape, batch_size) -> SplitModel:
    names = [n for n, _ in model.named_children()]
    mods = list(model.children())
    cuts = [
        _Cut(i, names[i], _nparams(mods[:i]), _nparams(mods[i:]), _has_conv(mods[i:]))
        for i in range(1, len(mods))
    ]
    cut = _choose(type(model).__name__, cuts, boundary,
                  lambda cs: _boundary_values(model, cs, lambda i, x: model[:i](x), input_shape), batch_size)
    return SplitModel(conv=model[: cut.index], fc=model[cut.index:], boundary=cut.boundary)


def _node_targets(node: fx.Node) -> set[str]:
    return {node.target} if node.op in ("call_module", "get_attr") else set()


def _graph_part(gm: fx.GraphModule, nodes: list[fx.Node], inputs: list[fx.Node], output: fx.Node) -> fx.GraphModule:
    """A GraphModule running `nodes` (in order) from `inputs` (placeholders) to `output`."""
    g = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    for n in inputs:
        env[n] = g.placeholder(n.name)
    for n in nodes:
        env[n] = g.node_copy(n, lambda a: env[a])
    g.output(env[output])
    return fx.GraphModule(gm, g)


def _split_traced(model: nn.Module, boundary, input_shape, batch_size) -> SplitModel:
    name = type(model).__name__
    try:
        gm = fx.GraphModule(model, _Tracer().trace(model))
    except Exception as e:  # fx raises many types for untraceable code
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise SplitError(f"{name}: cannot be traced by torch.fx ({first})") from None
    nodes = list(gm.graph.nodes)
    placeholders = [n for n in nodes if n.op == "placeholder"]
    body = [n for n in nodes if n.op not in ("placeholder", "output")]
    out_node = next(n for n in nodes if n.op == "output")
    if len(placeholders) != 1:
        raise SplitError(f"{name}: forward takes {len(placeholders)} inputs, expected one image tensor")
    owner = {n: _node_targets(n) for n in body}
    cuts: list[_Cut] = []
    for i in range(1, len(body)):
        before, after = body[:i], set(body[i:]) | {out_node}
        crossing = [n for n in [placeholders[0], *before] if any(u in after for u in n.users)]
        if len(crossing) != 1 or crossing[0].op == "placeholder":
            continue
        t_before = set().union(*(owner[n] for n in before))
        t_after = set().union(*(owner[n] for n in body[i:]))
        # A module used on both sides (or a parent/child of one) would put a parameter in both parts.
        if any(a == b or a.startswith(b + ".") or b.startswith(a + ".") for a in t_before for b in t_after):
            continue
        mods_b = [gm.get_submodule(t) for t in t_before if isinstance(_safe_get(gm, t), nn.Module)]
        mods_a = [gm.get_submodule(t) for t in t_after if isinstance(_safe_get(gm, t), nn.Module)]
        attr_b = sum(_safe_get(gm, t).numel() for t in t_before if isinstance(_safe_get(gm, t), nn.Parameter))
        attr_a = sum(_safe_get(gm, t).numel() for t in t_after if isinstance(_safe_get(gm, t), nn.Parameter))
        first = body[i]
        label = first.target if first.op == "call_module" else first.name
        cuts.append(_Cut(i, str(label), _nparams(mods_b) + attr_b, _nparams(mods_a) + attr_a, _has_conv(mods_a)))

    def prefix(i, x):
        return _graph_part(gm, body[:i], placeholders, _crossing(body, placeholders, out_node, i))(x)

    cut = _choose(name, cuts, boundary, lambda cs: _boundary_values(gm, cs, prefix, input_shape), batch_size)
    cross = _crossing(body, placeholders, out_node, cut.index)
    conv = _graph_part(gm, body[: cut.index], placeholders, cross)
    fc = _graph_part(gm, body[cut.index:], [cross], out_node.args[0])
    conv.train(model.training)
    fc.train(model.training)
    return SplitModel(conv=conv, fc=fc, boundary=cut.boundary)


def _safe_get(gm: fx.GraphModule, target: str):
    obj = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def _crossing(body, placeholders, out_node, i) -> fx.Node:
    after = set(body[i:]) | {out_node}
    return next(n for n in [placeholders[0], *body[:i]] if any(u in after for u in n.users))


def split_model(model: nn.Module, boundary: str | None = None, *, input_shape=(3, 224, 224),
                batch_size: int = 32) -> SplitModel:
    """Split `model` into CONV body and FC head; see the module docstring for the rule.

    `boundary` forces the cut before the named module (or fx node); `input_shape` (C, H, W)
    and `batch_size` only matter for the automatic choice. The result also says the boundary's
    per-sample shape and each part's forward FLOPs per sample at `input_shape` (one probe in
    eval mode), and `notes` warns when the FC side carries most of the compute."""
    name = type(model).__name__
    input_shape = tuple(int(v) for v in input_shape)
    try:
        if isinstance(model, nn.Sequential):
            split = _split_sequential(model, boundary, input_shape, batch_size)
        else:
            split = _split_traced(model, boundary, input_shape, batch_size)
        _check_all_params_placed(name, model, split)
        _probe(split, model, input_shape)
    except SplitError:
        raise
    except Exception as e:  # the model does not run on this input: say which input and what to do
        raise SplitError(f"{name} fails on an input of shape (1, {', '.join(map(str, input_shape))}) "
                         f"({_one_line(e)}); pass input_shape=(C, H, W) the model accepts") from None
    return split


def _check_all_params_placed(name: str, model: nn.Module, split: SplitModel) -> None:
    """Every parameter must live in one part: a module the traced forward never calls (an
    auxiliary classifier that runs only in training mode, say) would be trained by nobody."""
    placed = {id(p) for part in (split.conv, split.fc) for p in part.parameters()}
    missing = [(n, p) for n, p in model.named_parameters() if id(p) not in placed]
    if missing:
        mods = sorted({n.rsplit(".", 1)[0].split(".")[0] for n, _ in missing})
        raise SplitError(f"{name}: {sum(p.numel() for _, p in missing)} parameters ({', '.join(mods[:4])}) are in "
                         "neither part, the traced forward never uses them (auxiliary heads? build the model "
                         "without them, e.g. aux_logits=False)")


def _one_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _probe(split: SplitModel, model: nn.Module, input_shape) -> None:
    """Boundary shape and FLOPs per sample of each part, from one eval-mode sample on the model's device."""
    from torch.utils.flop_counter import FlopCounterMode  # torch's flop counter: ~80 more modules (triton); only when a split is probed, not for --help

    param = next(model.parameters(), None)
    device = param.device if param is not None else torch.device("cpu")
    modes = [(m, m.training) for m in (model, split.conv, split.fc)]
    for m, _ in modes:
        m.eval()
    try:
        with torch.no_grad():
            x = torch.zeros((1, *input_shape), device=device)
            with FlopCounterMode(display=False) as counter:
                a = split.conv(x)
            split.conv_flops = float(counter.get_total_flops())
            with FlopCounterMode(display=False) as counter:
                split.fc(a)
            split.fc_flops = float(counter.get_total_flops())
    finally:
        for m, training in modes:
            m.train(training)
    split.boundary_shape = tuple(a.shape[1:])
    if split.fc_compute_heavy:
        split.notes.append(
            f"the FC side carries {100 * split.fc_flop_share:.0f}% of the forward FLOPs: this cut is not "
            f"layer separation (the CONV body is only the layers before {split.boundary!r})")
