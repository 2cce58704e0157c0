"""Decode memory (issue 16): the peak RSS of a decode task on each image of the hostile corpus.

Each case runs in a fresh child process (``multiprocessing`` spawn) that imports zoorank, records
its resident memory, then does what an EMBED decode task does with one sample — decode it and make
its clean view and two SimCLR views (``zoorank.data.views.decode_views``) — and reports its peak RSS
(``harness.peak_rss``: ``ru_maxrss``) and the growth over the peak after imports. The "before"
column runs the decode of zoorank ≤ issue 16 on the same bytes (``Image.open → load →
convert("RGB")``, then resize the whole image so its shorter side is ``floor(size / crop_pct)`` and
crop): a 1×20000 strip becomes a 256 × 5,120,000 image. The children run under an address-space
limit (``--limit-gb``, default 6), so a case that would take more fails with MemoryError instead of
the machine; its figure is then "> limit". The corpus is generated (``tests/hostile_corpus.py``);
nothing asserts, it prints.

    .venv/bin/python benchmarks/performance/bench_decode.py              # 224 px, before and after
    .venv/bin/python benchmarks/performance/bench_decode.py --no-before  # after only
"""

from __future__ import annotations

import math
import multiprocessing as mp
import resource
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness
import harness
from harness import MB, peak_rss, table

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

GOAL_BYTES = 1024**3


def _naive(data: bytes, size: int, crop_pct: float):
    """The decode of zoorank ≤ issue 16: full decode, convert, resize everything, crop."""
    import io

    import numpy as np
    from PIL import Image

    img = Image.open(io.BytesIO(data))
    img.load()
    img = img.convert("RGB")
    scale = int(math.floor(size / crop_pct))
    w, h = img.size
    new_w, new_h = (scale, int(scale * h / w)) if w <= h else (int(scale * w / h), scale)
    img = img.resize((new_w, new_h), Image.Resampling.BICUBIC)
    top, left = int(round((new_h - size) / 2)), int(round((new_w - size) / 2))
    return np.array(img.crop((left, top, left + size, top + size)))


def _child(data: bytes, mode: str, size: int, crop_pct: float, limit: int, out) -> None:
    import numpy as np

    from zoorank.data.views import ViewGeometry, ViewPlan, decode_views

    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    base = peak_rss()
    status = "ok"
    try:
        if mode == "before":
            _naive(data, size, crop_pct)
        else:
            g = ViewGeometry(size, "bicubic", crop_pct)
            plans = [ViewPlan("clean", "clean", 1, np.array([0]), is_clean=True),
                     ViewPlan("simclr", "simclr", 2, np.array([0]))]
            rows = decode_views({"sample_id": np.array([0]),
                                 "payload": np.array([data], dtype=object),
                                 "name": np.array(["x"], dtype=object)}, g, plans, seed=0)
            status = "skipped" if rows["bad"].any() else "ok"
    except MemoryError:
        status = "MemoryError"
    except Exception as err:  # the naive decode's own failures (bombs, truncated files)
        status = type(err).__name__
    peak = peak_rss()
    out.put((status, peak, peak - base))


def measure(data: bytes, mode: str, size: int, crop_pct: float, limit: int) -> tuple[str, int, int]:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_child, args=(data, mode, size, crop_pct, limit, q))
    p.start()
    p.join(600)
    if p.exitcode != 0:
        return (f"exit {p.exitcode}", -1, -1)
    return q.get()


def main() -> None:
    args = harness.options(__doc__, "bench_decode", size=224, crop_pct=0.875, limit_gb=6.0,
                           no_before=False)
    from hostile_corpus import image_cases

    limit = int(args.limit_gb * 1024**3)
    modes = ["after"] if args.no_before else ["before", "after"]
    about = (f"Decode task peak RSS, {args.size}px crop_pct {args.crop_pct}, one child per case "
             f"(address space ≤ {args.limit_gb:g} GB).")
    print(about)
    worst, rows = {m: 0 for m in modes}, []
    for case in image_cases(big=True):
        cells = [case.name, len(case.data)]
        for m in modes:
            status, peak, grew = measure(case.data, m, args.size, args.crop_pct, limit)
            if status == "MemoryError":
                peak = grew = limit  # at least the limit
            worst[m] = max(worst[m], peak)
            shown = f"> {limit / MB:.0f}" if status == "MemoryError" else f"{peak / MB:.0f}"
            cells += [status, shown, f"{grew / MB:.0f}"]
        rows.append(cells)
        print(" ".join(map(str, cells)), flush=True)
    lines = [about, "", table(["case", "bytes", *[f"{m} {c}" for m in modes
                                                  for c in ("status", "peak MB", "+MB")]],
                              rows, "lr" + "lrr" * len(modes)), ""]
    lines += [f"decode peak RSS  {m}  worst case {worst[m] / MB:.0f} MB  goal {GOAL_BYTES / MB:.0f} "
              f"MB  {worst[m] / GOAL_BYTES:.2f}× goal" for m in modes]
    print("\n".join(lines))
    harness.write_results(args.markdown, "bench_decode — decode memory on the hostile corpus",
                          "\n".join(lines))


if __name__ == "__main__":
    main()
