"""Fixtures the unit tests share."""
import pytest


@pytest.fixture
def as_rank0_of(monkeypatch):
    """as_rank0_of(world): the environment torchrun gives rank 0 of `world` processes, without
    MASTER_ADDR (so reaching a process group would fail, not hang)."""
    def setenv(world):
        monkeypatch.setenv("RANK", "0")
        monkeypatch.setenv("LOCAL_RANK", "0")
        monkeypatch.setenv("WORLD_SIZE", str(world))
        monkeypatch.delenv("MASTER_ADDR", raising=False)
    return setenv
