"""Atomic writes (stanza_core.atomic): the target holds the old file or the new one, never half,
and a failed write leaves no temporary file behind."""
import pytest
import torch

from stanza_core import atomic


def test_a_write_replaces_the_file_whole(tmp_path):
    path = tmp_path / "sub" / "m.json"  # the folder is made
    atomic.write_text(path, "old")
    atomic.write_text(path, "new")
    assert path.read_text() == "new" and sorted(p.name for p in path.parent.iterdir()) == ["m.json"]
    atomic.torch_save({"w": torch.arange(3)}, tmp_path / "s.pt")
    assert torch.equal(torch.load(tmp_path / "s.pt", weights_only=True)["w"], torch.arange(3))


def test_a_failed_write_keeps_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "m.json"
    atomic.write_text(path, "old")
    with pytest.raises(RuntimeError, match="disk full"):
        with atomic.replacing(path, "w") as fh:
            fh.write("half")
            raise RuntimeError("disk full")
    assert path.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["m.json"]
