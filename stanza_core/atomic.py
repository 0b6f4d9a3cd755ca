"""Files written atomically: a temporary file beside the target, flushed and fsynced, then
renamed over it (os.replace), so a reader (a resumed run, a notebook sharing the runs cache)
sees the old file or the new one, never half of one.

    with replacing("out/model.pt") as fh: torch.save(state, fh)
    write_text("out/metrics.json", json.dumps(metrics))
    torch_save(model.state_dict(), "out/model.pt")
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import IO, Any


@contextlib.contextmanager
def replacing(path: str | os.PathLike, mode: str = "wb") -> Iterator[IO]:
    """A temporary file beside `path` (its folder made first); on a clean exit it is flushed,
    fsynced and renamed over `path`; on an error it is removed and `path` is left as it was."""
    path = os.fspath(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    try:
        with open(tmp, mode) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
        raise


def write_text(path: str | os.PathLike, text: str) -> None:
    with replacing(path, "w") as fh:
        fh.write(text)


def torch_save(obj: Any, path: str | os.PathLike) -> None:
    import torch  # torch: atomic serves torch-free modules (netem.launch, runs, nbtools)

    with replacing(path) as fh:
        torch.save(obj, fh)


def fsync_dir(path: str | os.PathLike) -> None:
    """Make the renames inside folder `path` durable (a no-op where a folder cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
