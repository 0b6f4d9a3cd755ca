"""compiled.compile_pieces: which modules `--compile` compiles (the compilation itself, and its
equality with eager steps, in tests/dist/test_compile.py)."""
import torch

from stanza_core.engine.compiled import compile_pieces
from stanza_core.models import SampleDropout, get_model
from stanza_core.split import split_model


def _compiled(m: torch.nn.Module) -> bool:
    return getattr(m, "_compiled_call_impl", None) is not None


def test_the_whole_model_or_the_two_parts_of_a_split_are_compiled_and_dropout_stays_eager():
    model = get_model("tiny_cnn", 10)
    assert compile_pieces(model, None, "default") == 1 and _compiled(model)
    drops = [m for m in model.modules() if isinstance(m, SampleDropout)]
    assert drops and all(getattr(m.forward, "_torchdynamo_disable", False) for m in drops)
    model = get_model("tiny_cnn", 10)
    split = split_model(model, input_shape=(3, 32, 32))
    assert compile_pieces(model, split, "default") == 2
    assert _compiled(split.conv) and _compiled(split.fc) and not _compiled(model)
