"""`python -m stanza_core.sim`: the simulated cluster.

    python -m stanza_core.sim grid [--list] [--points PATTERN]     the full grid, simulated (sim/grid.py)
    python -m stanza_core.sim run PROGRAM.json --gbps G [--delay-ms D] [--per-message-s A]
                                                                   one program (recorded or generated) timed
"""
from __future__ import annotations

import argparse
import json
import sys


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m stanza_core.sim", description="the simulated cluster (SimGrid)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("grid", help="simulate the full grid's configurations into benchmarks/results/sim")
    g.add_argument("--list", action="store_true", help="say how many are simulated, simulate nothing")
    g.add_argument("--points", default=None, help="only the configurations whose label matches this pattern")
    r = sub.add_parser("run", help="time one program file on SimGrid")
    r.add_argument("program")
    r.add_argument("--gbps", type=float, required=True, help="every link's payload rate, each direction")
    r.add_argument("--delay-ms", type=float, default=0.0)
    r.add_argument("--per-message-s", type=float, default=None, help="default: the validation's fitted value")
    args = ap.parse_args(argv)
    from .run import available  # the engine's config and torch (~1 s): not for --help

    if args.cmd == "grid":
        from . import grid  # the reproductions' specs and papermill: only the grid needs them

        pts = grid.select(grid.grid_points(), args.points)
        if not pts:
            print(f"error: --points {args.points!r} matches no grid configuration", file=sys.stderr)
            return 2
        if not args.list:
            if reason := available():
                print(f"error: {reason}", file=sys.stderr)
                return 3
            got = grid.run(pts)
            for line in got["failed"]:
                print(f"failed: {line}")
            print(f"simulated {got['simulated']} configurations in {got['seconds']:.0f} s")
        print(grid.listing(pts))
        return 0
    from . import program  # noqa: the rest of `run` below: torch and the engine, not for --help
    from .cluster import Platform  # torch and the engine's checks: not for --help
    from .grid import fitted_per_message_s  # the reproductions' specs: not for --help
    from .run import simulate_program, summarize  # torch and the engine: not for --help

    try:
        doc = program.read(args.program)
    except program.ProgramError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if reason := available():
        print(f"error: {reason}", file=sys.stderr)
        return 3
    alpha = fitted_per_message_s() if args.per_message_s is None else args.per_message_s
    plat = Platform(hosts=len(doc["ranks"]), target_gbps=args.gbps, delay_ms=args.delay_ms, per_message_s=alpha)
    out = summarize(doc, simulate_program(doc, plat))
    print(json.dumps({k: out[k] for k in ("step_times_s", "step_s", "bytes_per_step", "messages_per_step", "wall_s")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
