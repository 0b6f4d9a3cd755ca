"""Executing one notebook: papermill with the project's venv as the kernel, a failure as one
line, the executed notebook's HTML. Both `reproduce.run` (the experiments) and
`reproduce.gallery` (the tutorials) execute through here."""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from jupyter_client.kernelspec import KernelSpec
from jupyter_client.manager import AsyncKernelManager
from traitlets import CaselessStrEnum

from .spec import REPO_ROOT
from .offline import exporter_config, vendor, without_widget_state


class VenvKernelManager(AsyncKernelManager):
    """The kernel is this interpreter (the project's venv), whatever kernelspecs the user has,
    and it imports this checkout of stanza_core even without `pip install -e .`.

    On POSIX the kernel's channels are Unix sockets (ZeroMQ `ipc`) beside its connection file.
    Over TCP the client picks five free ports, closes them and the kernel binds them later, so
    any socket opened in between (the client's own connects included) can take one: the
    kernel's heartbeat then fails with "Address already in use" and the run can stall. Over
    ipc the kernel also has no reason to log ipykernel's "Kernel is running over TCP without
    encryption" warning into the run's output (tests/notebooks/test_reproduce.py checks both)."""

    transport = CaselessStrEnum(["tcp", "ipc"], default_value="ipc" if os.name == "posix" else "tcp", config=True)

    @property
    def kernel_spec(self) -> KernelSpec:
        path = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)
        return KernelSpec(argv=[sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                          display_name="stanza venv", language="python", env={"PYTHONPATH": path})


def execute(notebook: Path, output: Path, parameters: dict[str, Any], *, timeout_s: int | None = None,
            progress_bar: bool = True) -> None:
    """papermill-execute `notebook` into `output` with the venv kernel, cwd = the notebook's
    folder (as in Jupyter). Raises papermill's PapermillExecutionError when a cell fails."""
    import papermill as pm  # papermill: ~470 more modules; only when a notebook is read or run

    pm.execute_notebook(str(notebook), str(output), parameters=parameters, kernel_name="python3",
                        cwd=str(notebook.parent), progress_bar=progress_bar, execution_timeout=timeout_s,
                        kernel_manager_class=VenvKernelManager)


def one_line(e: BaseException) -> str:
    ename, evalue = getattr(e, "ename", None), getattr(e, "evalue", None)
    if ename:  # papermill: the notebook's own exception, and the cell it came from
        return f"{ename}: {str(evalue).strip().splitlines()[0] if evalue else ''} (cell [{e.exec_count}])"
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"


def export_html(ipynb: Path, out_root: Path) -> Path | None:
    """`ipynb` as HTML beside it, loading MathJax and require.js from `<out_root>/_static`
    (reproduce.offline: no CDN)."""
    try:
        import nbformat  # nbformat: nbconvert's; only the HTML export needs it
        from nbconvert import HTMLExporter  # nbconvert: ~500 more modules; only the export needs it


        vendor(out_root)
        nb = without_widget_state(nbformat.read(str(ipynb), as_version=4))
        body, _ = HTMLExporter(**exporter_config(ipynb.parent, out_root)).from_notebook_node(nb)
    except Exception as e:  # the executed notebook is what matters; its HTML is a convenience
        print(f"  HTML export of {ipynb.name} skipped: {one_line(e)}")
        return None
    out = ipynb.with_suffix(".html")
    out.write_text(body)
    return out
