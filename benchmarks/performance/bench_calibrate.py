"""How long ``zoorank calibrate`` takes on the committed per-model tables, and as the units grow.

1. ``zoorank calibrate --table TABLE --out RECORD`` as a user runs it (a child process: imports,
   reading the Parquet table, the protocol, writing the record), on each committed table
   (``benchmarks/zoos/units.parquet`` when it exists, ``benchmarks/zoos/validation_zoos.parquet``);
2. the protocol alone in this process (``zoorank.decide.calibrate.calibrate``: read, build the
   record by leave-one-unit-out, write) on the same tables, best of ``--repeat``;
3. the same on the largest table with its units copied ``--copies`` times (unit names made
   distinct: more units of the same sizes), to show how the cost grows with the number of units.

The bound: ``calibrate`` on the committed table in at most 30 s. Prints, never asserts::

    .venv/bin/python benchmarks/performance/bench_calibrate.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import harness  # noqa: E402
from harness import REPO, table, timed  # noqa: E402

TABLES = ("benchmarks/zoos/units.parquet", "benchmarks/zoos/validation_zoos.parquet")
BOUND_S = 30.0


def main() -> None:
    import pandas as pd

    from zoorank.decide.calibrate import calibrate, read_table

    args = harness.options(__doc__, "bench_calibrate", repeat=3, copies="2,4")
    rows, lines = [], []
    with tempfile.TemporaryDirectory(prefix="bench-calibrate-") as tmp:
        out = Path(tmp) / "record.json"
        present = [t for t in TABLES if (REPO / t).is_file()]
        for name in present:
            path = REPO / name
            child = harness.run_child([sys.executable, "-m", "zoorank", "-q", "calibrate",
                                       "--table", str(path), "--out", str(out)])
            record, seconds = timed(calibrate, [], out, table=path, repeat=args.repeat)
            frame = read_table(path)
            units = frame["unit"].nunique()
            rows.append([name, len(frame), units, len(record["boards"]), f"{child.seconds:.2f}",
                         f"{seconds:.2f}", f"{child.peak_rss / 2**20:.0f}"])
            lines.append(f"`zoorank calibrate` on {name} ({units} units): {child.seconds:.2f} s "
                         f"against the {BOUND_S:g} s bound: "
                         f"{'under' if child.seconds <= BOUND_S else 'OVER'}")
            print(lines[-1], flush=True)
        base = read_table(REPO / present[0])
        for k in sorted(int(c) for c in args.copies.split(",")):
            big = pd.concat([base.assign(unit=base["unit"].astype(str) + f"#{i}",
                                         zoo=base["zoo"].astype(str) + f"#{i}")
                             for i in range(k)], ignore_index=True)
            path = Path(tmp) / f"x{k}.parquet"
            big.to_parquet(path)
            _, seconds = timed(calibrate, [], out, table=path, repeat=1)
            rows.append([f"{present[0]} × {k}", len(big), big["unit"].nunique(), "",
                         "", f"{seconds:.2f}", ""])
            print(f"× {k}: {seconds:.2f} s", flush=True)
    body = "\n".join([
        table(["table", "models (rows)", "units", "record entries", "CLI s (child process)",
               "in process s (best of repeat)", "CLI peak RSS MiB"], rows), "",
        *lines, "",
        "*CLI*: the command as a user runs it, imports included. *In process*: reading the "
        "table, the protocol (leave-one-unit-out metric and shortlist choice per board and zoo "
        "kind, the bootstrap over units) and writing the record. The × k rows copy every unit "
        "k times under new names."])
    print(body)
    harness.write_results(args.markdown, "bench_calibrate — zoorank calibrate on the committed "
                          "per-model tables", body)


if __name__ == "__main__":
    main()
