"""``python -m tests.incidents table`` prints the incidents table (markdown);
``python -m tests.incidents show INCIDENT COLUMN`` prints one run's verdicts."""

from __future__ import annotations

import argparse
import time

from tests.incidents.matrix import COLUMNS, WORLDS, column, table
from tests.incidents.scenarios import INCIDENTS


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.incidents")
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("table", help="the incidents table, markdown")
    t.add_argument("--incident", action="append", choices=sorted(INCIDENTS))
    s = sub.add_parser("show", help="one run's verdicts, one line each")
    s.add_argument("incident", choices=sorted(INCIDENTS))
    s.add_argument("column", choices=COLUMNS)
    s.add_argument("--every", type=float, default=1.0, help="seconds between lines")
    args = p.parse_args(argv)
    if args.cmd == "table":
        t0 = time.process_time()
        print(table(tuple(args.incident or INCIDENTS)))
        print(f"\n<!-- {time.process_time() - t0:.1f} s of CPU -->")
        return 0
    for o, i in WORLDS:
        for src in ("traces", "metrics"):
            if column(o, src, i) == args.column:
                from tests.incidents.scenarios import World
                inc = INCIDENTS[args.incident]()
                w = World(inc, o, interval_s=i or 2.0)
                obs = next(x for x in w.run() if x.source == src)
                last = -1e9
                for j in obs.judgements:
                    if j.t - last >= args.every:
                        last = j.t
                        print(f"{j.t - inc.onset_s:+7.1f} {j.cause:15s} {j.whose:6s} {j.headline}")
                print("truth:", inc.truth(w))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
