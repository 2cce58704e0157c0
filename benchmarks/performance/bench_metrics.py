"""Metric-library benchmark (issue 2): the label-free suite over N × d, memory at large N, faiss vs sklearn.

For every (data, d, N) it times each metric of the label-free suite — RankMe (clean), RankMe on the
augmented views, LiDAR (n = min(N/10, 5000) clean samples × q = 10 views), alpha-ReQ, TwoNN and MLE
intrinsic dimension on L2-normalised rows, cluster learnability (K = round(√N), chunk 10k),
alignment (view 0 vs view 1), uniformity, coding rate and neighbourhood consistency of a 3-member
ensemble (reference set min(5000, N/2), k = min(100, 2% of it), as the SCORE stage does) — and, when
``zoorank.metrics.suite`` exists, the whole ``label_free_suite`` plus ``ensemble_reliability`` end
to end. It prints seconds per metric, the growth exponent in N (least-squares slope of log seconds
on log N), peak memory for N ≥ ``--trace-from`` (the metric once more in a fresh child process that
builds the same inputs: the growth of its ``ru_maxrss`` over the call, ``harness.run_child``; 0 B:
within the child's own setup peak) against the N×N float64 matrix a naive implementation would
allocate, and exact self-kNN (k = 10) with ``zoorank.metrics.neighbors.knn`` (faiss) against
scikit-learn's ``NearestNeighbors(algorithm="brute")`` on the same data.

Data:

* ``synthetic``: a float32 Gaussian mixture (100 components) whose per-coordinate variance decays
  as a power law j^-1; views add the same-spectrum noise at 0.3×; ensemble members add independent
  noise to the same points.
* ``real``: CIFAR-10 images (``../shared/data/cifar10``, decoded with Pillow) through seeded random
  ReLU features of their pixels (3072 → d); views are seeded pad-4 random crops + horizontal flips
  of the first n images; ensemble members are the features of three projection seeds. Decoded pixels
  and features are cached under ``--cache`` (default /tmp/zoorank-bench), never in the repository.

Timings on the 2-core development machines are shared with other work and noisy: each figure is one
run (the fastest of ``--repeat`` runs), printed with its CPU seconds (all threads), which other load
inflates less than wall time. Nothing here asserts: it prints.

    .venv/bin/python benchmarks/performance/bench_metrics.py --quick
    .venv/bin/python benchmarks/performance/bench_metrics.py --sizes 2000,10000 --dims 512,2048
    .venv/bin/python benchmarks/performance/bench_metrics.py --sizes 50000 --dims 512 --data synthetic
"""

from __future__ import annotations

import argparse
import gc
import io
import math
import resource
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness
import harness
import numpy as np
from harness import table

TARGET_SECONDS = 30.0
TARGET_N, TARGET_D = 10_000, 2048
LIDAR_Q = 10
LIDAR_MAX_N = 5000
NC_MEMBERS = 3
NC_REFERENCE = 5000
NC_K = 100
CL_CHUNK = 10_000
KNN_K = 10
REPO = Path(__file__).resolve().parents[2]
CIFAR = REPO.parent / "shared" / "data" / "cifar10"

# --------------------------------------------------------------------------------------------
# memory
# --------------------------------------------------------------------------------------------

def fixed_mmap_threshold(nbytes: int = 1 << 20) -> None:
    """Serve allocations >= ``nbytes`` by mmap and give them back on free (glibc only).

    glibc raises its mmap threshold after the first large free, after which big arrays come from a
    heap that keeps its pages: RSS would no longer rise for a later metric's allocations, and the
    sampled peaks would under-report. A fixed threshold keeps RSS equal to the live working set.
    """
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").mallopt(-3, nbytes)  # M_MMAP_THRESHOLD
    except (OSError, AttributeError):
        pass


def cpu_seconds() -> float:
    """User + system CPU time of this process, all threads (less sensitive to other load than wall)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


@dataclass
class Timing:
    seconds: float
    cpu: float  # CPU seconds of the call, all threads
    rss_extra: int | None  # peak RSS growth of the call (child_memory), bytes; None: not measured
    error: str | None = None


def measure(fn: Callable[[], Any]) -> Timing:
    """Wall and CPU seconds of ``fn()`` in this process (its memory: :func:`child_memory`)."""
    gc.collect()
    error = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start, cpu0 = time.perf_counter(), cpu_seconds()
        try:
            fn()
        except Exception as err:  # a benchmark reports a failing metric and goes on
            error = f"{type(err).__name__}: {err}"
        seconds = time.perf_counter() - start
        cpu = cpu_seconds() - cpu0
    return Timing(seconds, cpu, None, error)


def child_memory(name: str, data: str, N: int, d: int, cache: Path) -> int | None:
    """Peak RSS growth of metric ``name`` on the (data, N, d) inputs, in a fresh child process."""
    run = harness.run_child([sys.executable, __file__, "--memory-of", name, "--data", data,
                             "--sizes", str(N), "--dims", str(d), "--cache", str(cache)],
                            check=False)
    last = run.output.strip().splitlines()[-1:] if run.returncode == 0 else []
    return int(last[0]) if last and last[0].isdigit() else None


def memory_of(name: str, x: Inputs) -> int:
    """In the child: the growth of this process's peak RSS over one call of metric ``name``."""
    fn = {**metric_calls(x), **suite_calls(x)}[name]
    gc.collect()
    before = harness.peak_rss()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fn()
    return harness.peak_rss() - before


def fmt_bytes(b: float | None) -> str:
    if b is None:
        return "-"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if b >= scale:
            return f"{b / scale:.1f} {unit}"
    return f"{b:.0f} B"


# --------------------------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------------------------


@dataclass
class Inputs:
    """What the suite reads for one (data, d, N): clean rows, n × q views, ensemble members."""

    clean: np.ndarray  # (N, d) float32
    views: np.ndarray  # (n, q, d) float32
    members: list[np.ndarray] = field(default_factory=list)  # M × (N, d) float32


def lidar_n(N: int) -> int:
    return max(2, min(N // 10, LIDAR_MAX_N))


def _spectrum(d: int) -> np.ndarray:
    return (1.0 / np.sqrt(np.arange(1, d + 1, dtype=np.float64))).astype(np.float32)


def synthetic_inputs(N: int, d: int, seed: int = 0) -> Inputs:
    """Gaussian mixture with a power-law (j^-1) per-coordinate variance, float32 throughout."""
    rng = np.random.default_rng(seed)
    scale = _spectrum(d)
    centres = rng.standard_normal((100, d), dtype=np.float32) * (2.0 * scale)
    labels = rng.integers(0, 100, size=N)
    clean = rng.standard_normal((N, d), dtype=np.float32)
    clean *= scale
    clean += centres[labels]
    n = lidar_n(N)
    views = rng.standard_normal((n, LIDAR_Q, d), dtype=np.float32)
    views *= 0.3 * scale
    views += clean[:n, None, :]
    members = [clean]
    for _ in range(NC_MEMBERS - 1):
        m = rng.standard_normal((N, d), dtype=np.float32)
        m *= 0.5 * scale
        m += clean
        members.append(m)
    return Inputs(clean, views, members)


def _decode_cifar(cache: Path) -> np.ndarray:
    """All CIFAR-10 images (train then test), uint8 (60000, 32, 32, 3), cached as .npy."""
    path = cache / "cifar10_u8.npy"
    if path.exists():
        return np.load(path)
    import pyarrow.parquet as pq
    from PIL import Image

    images = []
    for split in ("train", "test"):
        column = pq.read_table(CIFAR / f"{split}.parquet", columns=["image"]).column("image")
        for item in column.to_pylist():
            data = item["bytes"] if isinstance(item, dict) else item
            images.append(np.asarray(Image.open(io.BytesIO(data)).convert("RGB")))
    arr = np.stack(images)
    cache.mkdir(parents=True, exist_ok=True)
    np.save(path, arr)
    return arr


def _augment(images: np.ndarray, q: int, seed: int) -> np.ndarray:
    """q seeded pad-4 random crops + horizontal flips of each image: (n, q, 32, 32, 3) uint8."""
    n = images.shape[0]
    rng = np.random.default_rng(seed)
    padded = np.pad(images, ((0, 0), (4, 4), (4, 4), (0, 0)), mode="reflect")
    offsets = rng.integers(0, 9, size=(n, q, 2))
    flips = rng.random((n, q)) < 0.5
    out = np.empty((n, q, 32, 32, 3), dtype=np.uint8)
    for i in range(n):
        for j in range(q):
            y, x = offsets[i, j]
            crop = padded[i, y : y + 32, x : x + 32]
            out[i, j] = crop[:, ::-1] if flips[i, j] else crop
    return out


def _random_relu_features(pixels: np.ndarray, d: int, seed: int, block: int = 8192) -> np.ndarray:
    """ReLU(x W) for standardised pixels x (3072) and a seeded Gaussian W (3072 × d), float32."""
    flat = pixels.reshape(-1, 32 * 32 * 3)
    W = np.random.default_rng(1000 + seed).standard_normal((flat.shape[1], d), dtype=np.float32)
    W /= np.float32(math.sqrt(flat.shape[1]))
    out = np.empty((flat.shape[0], d), dtype=np.float32)
    for s in range(0, flat.shape[0], block):
        x = flat[s : s + block].astype(np.float32) / 255.0
        x -= x.mean(axis=1, keepdims=True)
        x /= x.std(axis=1, keepdims=True) + 1e-6
        np.maximum(x @ W, 0.0, out=out[s : s + block])
    return out


def real_inputs(N: int, d: int, cache: Path) -> Inputs:
    """CIFAR-10 pixels through seeded random ReLU features; features cached per (d, seed, N)."""
    n = lidar_n(N)

    def cached(name: str, make: Callable[[], np.ndarray]) -> np.ndarray:
        path = cache / f"{name}.npy"
        if path.exists():
            return np.load(path)
        arr = make()
        cache.mkdir(parents=True, exist_ok=True)
        np.save(path, arr)
        return arr

    images = _decode_cifar(cache)
    if N > images.shape[0]:
        raise ValueError(f"real data has {images.shape[0]} CIFAR-10 images; N={N} is too many")
    members = [
        cached(f"cifar10_rf_d{d}_s{s}_N{N}", lambda s=s: _random_relu_features(images[:N], d, s))
        for s in range(NC_MEMBERS)
    ]
    views = cached(
        f"cifar10_rf_views_d{d}_n{n}_q{LIDAR_Q}",
        lambda: _random_relu_features(_augment(images[:n], LIDAR_Q, seed=0), d, 0).reshape(
            n, LIDAR_Q, d
        ),
    )
    return Inputs(members[0], views, members)


# --------------------------------------------------------------------------------------------
# the suite
# --------------------------------------------------------------------------------------------


def nc_split(N: int) -> tuple[int, int]:
    """(reference size, k) as the SCORE stage's ensemble_reliability chooses them."""
    ref = min(NC_REFERENCE, N // 2)
    return ref, min(NC_K, max(1, round(0.02 * ref)))


def metric_calls(x: Inputs) -> dict[str, Callable[[], Any]]:
    from zoorank import metrics as M

    Z, E = x.clean, x.views
    N, d = Z.shape
    ref, k = nc_split(N)
    # Deterministic disjoint split: ``ref`` evenly spaced rows are the reference set, the rest test.
    is_ref = np.zeros(N, dtype=bool)
    is_ref[np.linspace(0, N - 1, ref).astype(np.int64)] = True
    test = [m[~is_ref] for m in x.members]
    refs = [m[is_ref] for m in x.members]
    return {
        "rankme": lambda: M.rankme(Z),
        "rankme_aug": lambda: M.rankme(E.reshape(-1, d)),
        "lidar": lambda: M.lidar(E),
        "alpha_req": lambda: M.alpha_req(Z),
        "twonn_id": lambda: M.twonn_id(Z, normalize=True),
        "mle_id": lambda: M.mle_id(Z, normalize=True),
        "cluster_learnability": lambda: M.cluster_learnability(
            Z, n_clusters=int(round(math.sqrt(N))), chunk_size=CL_CHUNK
        ),
        "alignment": lambda: M.alignment(E[:, 0], E[:, 1]),
        "uniformity": lambda: M.uniformity(Z),
        "coding_rate": lambda: M.coding_rate(Z),
        "nc": lambda: M.neighborhood_consistency(test, refs, k=k),
    }


def suite_calls(x: Inputs) -> dict[str, Callable[[], Any]]:
    """The SCORE stage's own entry points, when zoorank.metrics.suite exists."""
    try:
        from zoorank.metrics import suite
    except ImportError:
        return {}
    calls: dict[str, Callable[[], Any]] = {}
    if hasattr(suite, "label_free_suite"):
        names = list(getattr(suite, "CONFIG_METRICS", {}) or ["rankme"])
        calls["label_free_suite"] = lambda: suite.label_free_suite(x.clean, x.views, names)
    if hasattr(suite, "ensemble_reliability"):
        ids = np.arange(x.clean.shape[0])
        calls["ensemble_reliability"] = lambda: suite.ensemble_reliability(x.members, ids)
    return calls


def knn_compare(Z: np.ndarray) -> dict[str, float]:
    from sklearn.neighbors import NearestNeighbors

    from zoorank.metrics.neighbors import knn

    gc.collect()
    t0, c0 = time.perf_counter(), cpu_seconds()
    _, idx_faiss = knn(Z, k=KNN_K)
    t_faiss, c_faiss = time.perf_counter() - t0, cpu_seconds() - c0
    gc.collect()
    t0 = time.perf_counter()
    knn(Z, k=KNN_K, exact_distances=False)
    t_search = time.perf_counter() - t0
    gc.collect()
    t0, c0 = time.perf_counter(), cpu_seconds()
    nn = NearestNeighbors(n_neighbors=KNN_K, algorithm="brute").fit(Z)
    _, idx_sk = nn.kneighbors()  # X=None: self-search, each point excluded from its own neighbours
    t_sk, c_sk = time.perf_counter() - t0, cpu_seconds() - c0
    same = np.mean(np.sort(idx_faiss, axis=1) == np.sort(idx_sk, axis=1))
    return {"faiss": t_faiss, "search": t_search, "sklearn": t_sk, "faiss_cpu": c_faiss, "sklearn_cpu": c_sk,
            "agree": float(same)}


# --------------------------------------------------------------------------------------------
# reporting
# --------------------------------------------------------------------------------------------


def growth_exponent(sizes: list[int], seconds: list[float]) -> float | None:
    pts = [(n, s) for n, s in zip(sizes, seconds) if s > 0 and math.isfinite(s)]
    if len(pts) < 2:
        return None
    x = np.log([p[0] for p in pts])
    y = np.log([p[1] for p in pts])
    return float(np.polyfit(x, y, 1)[0])


def parse_ints(text: str) -> list[int]:
    return [int(v.replace("k", "000")) for v in text.split(",") if v.strip()]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small sizes (N 1000,2000 × d 64,256)")
    p.add_argument("--sizes", type=parse_ints, default=None, help="N values, e.g. 2000,10000,50000")
    p.add_argument("--dims", type=parse_ints, default=None, help="d values, e.g. 512,2048")
    p.add_argument("--data", default="synthetic,real", help="synthetic, real or both (comma list)")
    p.add_argument("--no-suite", action="store_true", help="skip the label_free_suite end-to-end run")
    p.add_argument("--no-knn", action="store_true", help="skip the faiss vs sklearn comparison")
    p.add_argument("--trace-from", type=int, default=20_000,
                   help="measure each metric's peak memory (a child each) for N >= this (default 20000)")
    p.add_argument("--memory-of", help=argparse.SUPPRESS)  # in the child of child_memory
    p.add_argument("--cache", type=Path, default=Path("/tmp/zoorank-bench"))
    p.add_argument("--repeat", type=int, default=1,
                   help="run each metric R times and keep the fastest (noisy shared machines)")
    p.add_argument("--only", default=None, help="comma list of metric names to run (default: all)")
    p.add_argument("--threads", type=int, default=None, help="BLAS/faiss threads (default: all cores)")
    harness.results_option(p, "bench_metrics")
    args = p.parse_args(argv)

    fixed_mmap_threshold()
    sizes = args.sizes or ([1000, 2000] if args.quick else [2000, 10_000, 50_000])
    dims = args.dims or ([64, 256] if args.quick else [512, 2048])
    datas = [s.strip() for s in args.data.split(",") if s.strip()]
    if args.threads:
        from threadpoolctl import threadpool_limits

        threadpool_limits(args.threads)
        from zoorank.metrics.neighbors import _faiss

        _faiss().omp_set_num_threads(args.threads)
    if args.memory_of:
        data, N, d = datas[0], sizes[0], dims[0]
        x = synthetic_inputs(N, d) if data == "synthetic" else real_inputs(N, d, args.cache)
        print(memory_of(args.memory_of, x))
        return 0
    if "real" in datas and not (CIFAR / "test.parquet").exists():
        print(f"real data skipped: {CIFAR} not found")
        datas.remove("real")

    import faiss
    import sklearn

    report = harness.Report()
    report.say(f"bench_metrics  sizes={sizes} dims={dims} data={datas}  numpy {np.__version__}  "
               f"faiss {faiss.__version__}  sklearn {sklearn.__version__}")
    report.say(f"timings: fastest of {max(1, args.repeat)} run(s) each, on shared cores (noisy); "
               "memory: the peak RSS growth of one more call in a fresh child")

    # Warm-up: imports, faiss and BLAS thread pools, scipy's LAPACK, so the first timed call is not
    # charged for them.
    warm = synthetic_inputs(600, 32, seed=1)
    for fn in [*metric_calls(warm).values(), *suite_calls(warm).values()]:
        measure(fn)
    del warm

    # results[(data, d)][metric][N] = Timing
    results: dict[tuple[str, int], dict[str, dict[int, Timing]]] = {}
    knn_rows: list[list[str]] = []
    summary: list[str] = []
    t_all = time.perf_counter()
    for data in datas:
        for d in dims:
            per_metric: dict[str, dict[int, Timing]] = {}
            results[(data, d)] = per_metric
            for N in sizes:
                t0 = time.perf_counter()
                x = synthetic_inputs(N, d) if data == "synthetic" else real_inputs(N, d, args.cache)
                prep = time.perf_counter() - t0
                trace = N >= args.trace_from
                calls = metric_calls(x)
                if not args.no_suite:
                    calls.update(suite_calls(x))
                if args.only:
                    keep = set(args.only.split(","))
                    calls = {k: v for k, v in calls.items() if k in keep}
                line = []
                for name, fn in calls.items():
                    tm = min((measure(fn) for _ in range(max(1, args.repeat))),
                             key=lambda t: t.seconds)
                    if trace and not tm.error:
                        tm.rss_extra = child_memory(name, data, N, d, args.cache)
                    per_metric.setdefault(name, {})[N] = tm
                    line.append(f"{name} {tm.seconds:.2f}s" + (" ERROR" if tm.error else ""))
                    if tm.error:
                        print(f"  {name} N={N} d={d} {data}: {tm.error}", flush=True)
                print(f"[{data} N={N} d={d}] data {prep:.1f}s | " + ", ".join(line), flush=True)

                own_names = [m for m in metric_calls(x) if m in calls]
                own = [per_metric[m][N] for m in own_names]
                total = sum(t.seconds for t in own)
                total_cpu = sum(t.cpu for t in own)
                summary.append(
                    f"metrics  N={N} d={d} {data}  {'subset' if args.only else 'suite'} {total:.1f} s "
                    f"({total_cpu:.1f} CPU-s)  "
                    f"target {TARGET_SECONDS:.0f} s  {total / TARGET_SECONDS:.2f}× target"
                    + ("  (the target size)" if (N, d) == (TARGET_N, TARGET_D) else "")
                )
                if trace:
                    nxn = N * N * 8
                    peak_rss = max(t.rss_extra or 0 for t in own)
                    worst = max(own, key=lambda t: t.rss_extra or 0)
                    worst_name = [m for m in own_names if per_metric[m][N] is worst][0]
                    summary.append(
                        f"memory   N={N} d={d} {data}  peak RSS +{fmt_bytes(peak_rss)} ({worst_name})  "
                        f"N×N float64 {fmt_bytes(nxn)}  {peak_rss / nxn:.3f}× N×N"
                    )
                if data == datas[0] and not args.no_knn:
                    r = knn_compare(x.clean)
                    knn_rows.append([
                        f"N={N} d={d}", f"{r['faiss']:.2f} ({r['faiss_cpu']:.2f})",
                        f"{r['search']:.2f}", f"{r['sklearn']:.2f} ({r['sklearn_cpu']:.2f})",
                        f"{r['faiss'] / r['sklearn']:.2f}× ({r['faiss_cpu'] / r['sklearn_cpu']:.2f}×)",
                        f"{r['agree']:.4f}",
                    ])
                    summary.append(
                        f"knn      N={N} d={d} k={KNN_K}  faiss {r['faiss']:.2f} s  sklearn brute "
                        f"{r['sklearn']:.2f} s  {r['faiss'] / r['sklearn']:.2f}× sklearn  "
                        f"(CPU {r['faiss_cpu'] / r['sklearn_cpu']:.2f}×)"
                    )
                del x, calls
                gc.collect()

    suite_only = ("label_free_suite", "ensemble_reliability")
    for (data, d), per_metric in results.items():
        traced = sizes[-1] >= args.trace_from
        header = ["metric"] + [f"N={N} s (CPU)" for N in sizes] + ["exp", "exp CPU"]
        if traced:
            header += [f"RSS+ N={sizes[-1]}"]
        rows = []
        names = [n for n in per_metric if n not in suite_only]
        for name in [*names, "suite total", *[n for n in per_metric if n in suite_only]]:
            if name == "suite total":
                by_n = {
                    N: Timing(sum(per_metric[m][N].seconds for m in names if N in per_metric[m]),
                              sum(per_metric[m][N].cpu for m in names if N in per_metric[m]), None)
                    for N in sizes
                }
            else:
                by_n = per_metric[name]
            ok = [N in by_n and not by_n[N].error for N in sizes]
            secs = [by_n[N].seconds if good else math.nan for N, good in zip(sizes, ok)]
            cpus = [by_n[N].cpu if good else math.nan for N, good in zip(sizes, ok)]
            exps = [growth_exponent(sizes, v) for v in (secs, cpus)]
            row = [name] + [f"{w:.2f} ({c:.2f})" for w, c in zip(secs, cpus)]
            row += ["-" if e is None else f"{e:.2f}" for e in exps]
            if traced:
                last = by_n.get(sizes[-1]) if name != "suite total" else None
                row += [fmt_bytes(last.rss_extra if last else None)]
            rows.append(row)
        report.say(f"\n## Seconds per metric (CPU-seconds) — {data}, d={d}; exp = growth exponent "
                   f"in N\n\n{table(header, rows)}")
    if knn_rows:
        header = ["size", "faiss s (CPU)", "search only s", "sklearn brute s (CPU)", "faiss/sklearn",
                  "same neighbours"]
        report.say(f"\n## Exact self-kNN, k={KNN_K} ({datas[0]})\n\n{table(header, knn_rows)}\n")
    for line in summary:
        report.say(line)
    report.say(f"process  peak RSS {fmt_bytes(harness.peak_rss())} (ru_maxrss, includes the inputs)  "
               f"wall {time.perf_counter() - t_all:.0f} s")
    report.write(args.markdown, "bench_metrics — the label-free metric library")
    return 0


if __name__ == "__main__":
    sys.exit(main())
