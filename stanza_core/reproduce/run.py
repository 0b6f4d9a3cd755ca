"""Run the experiments' notebooks with papermill (the venv's kernel) and record their status."""
from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from .. import DIST_NAME, __version__
from ..errors import OneLineParser, command_name
from ..runs.store import Store
from .execute import VenvKernelManager, execute, export_html, one_line
from .grid import budget_seconds, grid, run_grid, select
from .plotlyjs import share_plotlyjs
from .report import section_badge, write_index
from .spec import MARKER, REPO_ROOT, Spec, SpecError, evaluate_claims, load_specs
from .tally import DIFFERS, GOAL_MISSED, REPORTED_ONLY, figure_lines, tally, tally_lines
from .gallery import run_tutorials, tutorial_notebooks, write_gallery

__all__ = ["VenvKernelManager", "execute", "unmet_requirements", "run_experiment", "prepare_out", "main"]


def unmet_requirements(requires: list[str]) -> list[str]:
    checks = {
        "linux": lambda: sys.platform.startswith("linux"),
        "root": lambda: hasattr(os, "geteuid") and os.geteuid() == 0,
        "tc": lambda: bool(shutil.which("tc") and shutil.which("ip")),
        "cuda": lambda: __import__("torch").cuda.is_available(),
    }
    return [r for r in requires if not checks[r]()]


def run_experiment(spec: Spec, mode: str, out_root: Path, *, html: bool = True) -> dict[str, Any]:
    """Run one experiment into `<out_root>/<name>/` (replaced); return and store its status."""
    out = out_root / spec.name
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    nb = spec.notebook.relative_to(REPO_ROOT) if spec.notebook.is_relative_to(REPO_ROOT) else spec.notebook
    status: dict[str, Any] = {"name": spec.name, "title": spec.title, "paper": spec.paper, "mode": mode,
                              "notebook": str(nb), "parameters": spec.params[mode],
                              "started": time.strftime("%Y-%m-%d %H:%M:%S"),
                              "status": "ok", "error": None, "executed": None, "html": None, "claims": []}
    t0 = time.perf_counter()
    if unmet := unmet_requirements(spec.requires):
        status.update(status="skipped", error=f"needs {', '.join(unmet)}")
    else:
        executed = out / spec.notebook.name
        try:
            execute(spec.notebook, executed, {**spec.params[mode], "out_dir": str(out.resolve())},
                    timeout_s=spec.timeout_s)
        except Exception as e:  # any failure of one notebook is reported; the others still run
            status.update(status="failed", error=one_line(e))
        share_plotlyjs(out, out_root)  # its figures and notebook load <out_root>/plotly.min.js
        if executed.exists():
            status["executed"] = executed.name
            if html and (h := export_html(executed, out_root)):
                status["html"] = h.name
        results = None
        if (out / "results.json").is_file():
            results = json.loads((out / "results.json").read_text())
        elif status["status"] == "ok":
            status.update(status="failed", error="the notebook wrote no results.json")
        status["modelled_only"] = (results or {}).get("modelled_only")  # why nothing was measured, if so
        status["claims"], missing = evaluate_claims(spec, results, mode)
        if missing and status["status"] == "ok":
            status.update(status="failed", error=f"results.json lacks claim keys {missing}")
    status["duration_s"] = round(time.perf_counter() - t0, 1)
    (out / "status.json").write_text(json.dumps(status, indent=1, default=str) + "\n")
    return status


def prepare_out(out_root: Path) -> None:
    """Create `out_root` as ours, or accept it if ours already; refuse anyone else's files."""
    if out_root.exists() and not out_root.is_dir():
        raise SpecError(f"--out {out_root} exists and is not a folder")
    # The project's own reproductions/out (git-ignored; tests drop screenshots there too) is
    # always ours; any other non-empty folder must carry the marker.
    ours = out_root.resolve() == (REPO_ROOT / "reproductions" / "out").resolve()
    if out_root.is_dir() and any(out_root.iterdir()) and not ours and not (out_root / MARKER).exists():
        raise SpecError(f"refusing to write into {out_root}: it is not empty and was not made by "
                        f"stanza_core.reproduce (no {MARKER}); choose a new or empty folder")
    out_root.mkdir(parents=True, exist_ok=True)
    (out_root / MARKER).write_text("This folder is rewritten by `python -m stanza_core.reproduce`.\n")


def main(argv: list[str] | None = None) -> int:
    ap = OneLineParser(prog=command_name("stanza_core.reproduce"),
                                 description="Run every reproductions/*.yaml notebook and write <out>/index.html.")
    ap.add_argument("--full", action="store_true", help="the paper-scale parameters (default: quick)")
    ap.add_argument("--only", default=None, help="comma-separated experiment names (YAML stems)")
    ap.add_argument("--specs", type=Path, default=REPO_ROOT / "reproductions", help="folder of YAML files")
    ap.add_argument("--out", type=Path, default=None, help="output folder (default: <specs>/out)")
    ap.add_argument("--no-html", action="store_true", help="skip the nbconvert HTML export")
    ap.add_argument("--no-tutorials", action="store_true", help="skip the tutorials (they run unless --only is given)")
    ap.add_argument("--list", action="store_true",
                    help="with --full: list the full grid's replayed configurations against the store of measured "
                         "ones (benchmarks/results/full), with the time to fill it; measures nothing")
    ap.add_argument("--points", default=None, metavar="PATTERN",
                    help='with --full: list or fill only the grid configurations whose label matches this shell '
                         'pattern (e.g. "*N=16*" or "vgg16 N=16 ps *"); the notebooks do not run')
    ap.add_argument("--budget-min", type=float, default=None,
                    help="with --full: measure missing configurations of the grid for at most this many minutes, "
                         "then stop (the notebooks run once the grid is complete); default: measure them all")
    ap.add_argument("--version", action="version", version=f"{DIST_NAME} {__version__}")
    args = ap.parse_args(argv)
    mode = "full" if args.full else "quick"
    out_root = args.out if args.out is not None else args.specs / "out"
    try:
        if (args.list or args.budget_min is not None or args.points is not None) and not args.full:
            raise SpecError("--list, --budget-min and --points are about the full grid: add --full, or FULL=1 with make")
        budget_s = budget_seconds(args.budget_min)
        if args.specs == ap.get_default("specs") and not any(args.specs.glob("*.yaml")):
            raise SpecError(f"{ap.prog} runs the notebooks of a source checkout, and {args.specs.parent} is an "
                            "installed package (no reproductions/ or notebooks/): clone the repository and run "
                            "`make reproduce` there, or pass --specs CHECKOUT/reproductions")
        specs = load_specs(args.specs)
        if args.only:
            wanted = [n.strip() for n in args.only.split(",") if n.strip()]
            if unknown := [n for n in wanted if n not in {s.name for s in specs}]:
                raise SpecError(f"--only: unknown experiments {unknown}; known: {[s.name for s in specs]}")
            specs = [s for s in specs if s.name in wanted]
        if args.points is not None:
            select(grid(specs, "full"), args.points)  # a pattern that matches nothing: one line, before any work
        if not args.list:
            prepare_out(out_root)
    except (SpecError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.full:  # the replayed configurations first, into the store the notebooks then read
        got = run_grid(specs, store=Store(), cache_dir=out_root / "bench-cache", list_only=args.list,
                       budget_s=budget_s, pattern=args.points)
        if got == "listed":
            return 0
        if args.points is not None:
            print("notebooks not run: --points fills part of the grid only")
            return {"complete": 0, "partial": 0}.get(got, 1)
        if got != "complete" and args.budget_min is not None:
            print("notebooks not run: the grid is not complete (they would measure the missing configurations "
                  "without a budget); run again to continue filling it")
            return 0 if got == "partial" else 1
    statuses = []
    for i, spec in enumerate(specs, start=1):
        print(f"[{i}/{len(specs)}] {spec.name} ({mode}): {spec.notebook.name}", flush=True)
        st = run_experiment(spec, mode, out_root, html=not args.no_html)
        print(f"[{i}/{len(specs)}] {spec.name}: {section_badge(st)} in {st['duration_s']} s"
              + (f" - {st['error']}" if st["error"] else ""), flush=True)
        statuses.append(st)
    course = args.specs.resolve().parent / "tutorials"  # beside reproductions/, as in this repository
    tutorials = ([] if args.only or args.no_tutorials
                 else run_tutorials(out_root, html_export=not args.no_html, folder=course))
    index = write_index(out_root, load_specs(args.specs))
    gallery = write_gallery(out_root, load_specs(args.specs), tutorial_notebooks(course))
    failed = [s for s in statuses + tutorials if s["status"] == "failed"]
    print(f"report: {index}")
    print(f"gallery: {gallery}")
    rows = [(s["name"], c) for s in statuses for c in s["claims"]]
    for status, say in ((DIFFERS, "differs from the paper"), (GOAL_MISSED, "goal missed"),
                        (REPORTED_ONLY, "reported only (no verdict)")):
        for name, c in rows:
            if c["status"] == status:
                print(f"{say}: {name}: {c['claim']}")
    counts = tally(c for _, c in rows)
    if counts.unjudged:
        print(f"not judged in this run (another mode's, modelled only, or missing): {counts.unjudged}")
    for line in figure_lines(c for _, c in rows) + tally_lines(counts):
        print(line)
    if failed:
        print("failed: " + "; ".join(f"{s['name']} ({s['error']})" for s in failed), file=sys.stderr)
        return 1
    return 0
