"""Shared by the multi-process tests: the single-process oracle, run once per session.

Several files compare their strategy against `local` on the same arguments (tiny_cnn, 32x32,
global batch 24, 4 or 6 steps): a `--strategy local` job is seeded and single-threaded, so one
run answers them all; each distinct set of arguments still gets its own run."""
from __future__ import annotations

import pytest

from dist_launch import train


def _options(args: tuple[str, ...]) -> tuple[tuple[str, ...], ...]:
    """The arguments as a set of options, each flag with its values: the same options in another
    order are the same run. ("--steps", "4", "--lr", "0.05") -> (("--lr", "0.05"), ("--steps", "4"))"""
    groups: list[list[str]] = []
    for a in args:
        if a.startswith("--") or not groups:
            groups.append([a])
        else:
            groups[-1].append(a)
    return tuple(sorted(tuple(g) for g in groups))


@pytest.fixture(scope="session")
def local_run(tmp_path_factory):
    """local_run(*args) -> (metrics, saved state_dict, completed process) of `--strategy local`
    with `args`, launched the first time these options are asked for. Read-only: the same dicts
    go to every test that asks."""
    runs: dict[tuple, tuple] = {}

    def get(*args: str):
        key = _options(args)
        if key not in runs:
            runs[key] = train(tmp_path_factory.mktemp("local"), "local", 1, "--strategy", "local", *args)
        return runs[key]

    return get
