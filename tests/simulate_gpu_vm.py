"""Run pytest as on a GPU VM whose image lacks the notebook packages.

    python tests/simulate_gpu_vm.py [pytest arguments]     (default: -m "not slow")

The H200 VM the project was tried on has torch, torchvision, numpy, scipy, scikit-learn, pyyaml,
tqdm, cloudpickle, pytest and pytest-timeout, but none of the notebook stack (plotly, papermill,
nbformat, nbclient, jupytext, ipywidgets, IPython, ipykernel, kaleido, selenium). This script
makes those imports fail here, in pytest and in every process it starts (a `sitecustomize` on
PYTHONPATH installs an import hook raising ModuleNotFoundError for them), so one can check that
`pytest -m "not slow"` on such a machine collects without errors: tests that need those
packages skip with a reason. It cannot make CUDA visible; tests/unit/test_cuda_visible.py fakes
that in-process.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ABSENT = ("plotly", "papermill", "nbformat", "nbclient", "jupytext", "ipywidgets", "IPython", "ipykernel",
          "kaleido", "selenium")

SITECUSTOMIZE = f'''
import importlib.abc
import sys

ABSENT = {ABSENT!r}


class _Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ABSENT:
            raise ModuleNotFoundError(f"No module named {{name!r}} (hidden: simulated GPU VM)", name=name)
        return None


sys.meta_path.insert(0, _Absent())
'''


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="gpu-vm-imports-") as tmp:
        with open(os.path.join(tmp, "sitecustomize.py"), "w") as fh:
            fh.write(SITECUSTOMIZE)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([tmp, ROOT] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        check = subprocess.run([sys.executable, "-c", "import plotly"], env=env, capture_output=True, text=True)
        if check.returncode == 0 or "simulated GPU VM" not in check.stderr:
            print("error: the import hook did not take effect (is another sitecustomize first on the path?)",
                  file=sys.stderr)
            return 2
        args = argv or ["-m", "not slow"]
        return subprocess.run([sys.executable, "-m", "pytest", *args], cwd=ROOT, env=env).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
