"""Layer anatomy (notebook 01): each zoo model profiled at one input (parameters, FLOPs and, when
timed, seconds per part), and the numbers its results.json holds."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tqdm import tqdm

from .. import checks
from ..anatomy import Profile, profile_model
from ..local_device import local_device
from ..models import get_model
from ..perf.profiles import shape_model
from ..split import SplitError


def profile_models(models: Sequence[str] | str, *, image_size: int = 224, num_classes: int = 1000,
                   batch_size: int = 32, time: bool = False, device: str = "auto", reps: int = 5) -> list[Profile]:
    """Build each zoo model (random init) and profile it at a square `image_size` input.

    All parameters are checked before the first model is built, so bad input fails at once."""
    checks.positive_int("image_size", image_size)
    checks.positive_int("batch_size", batch_size)
    names = checks.model_names(models, image_size)
    dev = local_device(device) if time else "cpu"
    profiles = []
    for name in tqdm(names, desc="profiling", unit="model"):
        model = get_model(name, num_classes) if time else shape_model(name, num_classes)  # counts need no values
        try:
            profiles.append(profile_model(model, (3, image_size, image_size), batch_size, time=time,
                                          name=name, device=dev, reps=reps))
        except (RuntimeError, SplitError) as e:  # e.g. a feature map shrinking to zero at a small image_size
            first = str(e).strip().splitlines()[0]
            raise ValueError(f"{name} cannot run at image_size={image_size}: {first}") from None
        del model  # VGG holds ~0.5 GB of parameters: free it before building the next
    return profiles


def _part_summary(p: Profile) -> dict[str, Any]:
    out: dict[str, Any] = {
        "conv_params": p.conv.params, "fc_params": p.fc.params, "params": p.params,
        "fc_param_share": p.fc_param_share(),
        "conv_flops": p.conv.flops, "fc_flops": p.fc.flops, "fc_flop_share": p.fc_flop_share(),
        "boundary": p.boundary, "boundary_values": p.boundary_values, "boundary_bytes": p.boundary_bytes,
        # What one step of data parallelism syncs, per part (fp32 gradients).
        "conv_grad_bytes": 4 * p.conv.params, "fc_grad_bytes": 4 * p.fc.params, "grad_bytes": 4 * p.params,
        "timing": None,
    }
    if p.conv.fwd_s is not None:
        conv_s, fc_s = p.conv.fwd_s + p.conv.bwd_s, p.fc.fwd_s + p.fc.bwd_s
        out["timing"] = {"device": p.timed_on, "batch_size": p.batch_size,
                         "conv_fwd_s": p.conv.fwd_s, "conv_bwd_s": p.conv.bwd_s,
                         "fc_fwd_s": p.fc.fwd_s, "fc_bwd_s": p.fc.bwd_s,
                         "fc_time_share": fc_s / (conv_s + fc_s) if conv_s + fc_s > 0 else 0.0}
    return out


def anatomy_results(profiles: Sequence[Profile]) -> dict[str, Any]:
    """results.json of notebook 01: per model the key numbers (`models.<name>.<key>`) and the
    full profiles (`profiles.<name>`, loadable with Profile.from_dict) for later notebooks."""
    first = profiles[0]
    return {
        "experiment": "anatomy",
        "input_shape": list(first.input_shape),
        "batch_size": first.batch_size,
        "models": {p.model: _part_summary(p) for p in profiles},
        "profiles": {p.model: p.to_dict() for p in profiles},
    }
