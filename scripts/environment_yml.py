"""Write environment.yml (conda users) from constraints.txt (the exact versions CI tests).

    python scripts/environment_yml.py          # rewrite environment.yml
    python scripts/environment_yml.py --check  # exit 1 if environment.yml differs from what it would write

conda-forge gives Python and pip; pip then installs every package at its constraints.txt pin and
this checkout with its dev extra, so a conda environment holds the versions the tests ran on,
not pyproject.toml's ranges. The CUDA libraries torch pulls on Linux (nvidia-*, triton) are
pinned for Linux only: elsewhere torch's wheel does not ask for them.
tests/unit/test_environment.py runs --check.
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINUX_ONLY = ("nvidia-", "triton")  # wheels that exist for Linux only


def pins(constraints: str) -> list[str]:
    """The `name==version` lines of constraints.txt, in its order (comments and blanks dropped)."""
    out = []
    for line in constraints.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if "==" not in line:
            raise ValueError(f"constraints.txt: {line!r} is not an exact pin (name==version)")
        out.append(line)
    return out


def render(constraints: str, python: str = "3.11") -> str:
    lines = [
        "# Generated from constraints.txt by scripts/environment_yml.py: do not edit by hand.",
        "# Conda users: `conda env create -f environment.yml && conda activate stanza`.",
        "# conda-forge gives Python and pip; pip installs the exact versions CI tests, then this checkout.",
        "name: stanza",
        "channels:",
        "  - conda-forge",
        "dependencies:",
        f"  - python={python}",
        "  - pip",
        "  - pip:",
    ]
    for pin in pins(constraints):
        marker = "; sys_platform == 'linux'" if pin.lower().startswith(LINUX_ONLY) else ""
        lines.append(f'      - "{pin}{marker}"')
    lines.append('      - "-e .[dev]"')
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    want = render((ROOT / "constraints.txt").read_text())
    path = ROOT / "environment.yml"
    if argv == ["--check"]:
        if path.read_text() != want:
            print("error: environment.yml differs from constraints.txt; run python scripts/environment_yml.py",
                  file=sys.stderr)
            return 1
        return 0
    if argv:
        print("error: expected no argument or --check", file=sys.stderr)
        return 2
    path.write_text(want)
    return 0


if __name__ == "__main__":
    sys.exit(main())
