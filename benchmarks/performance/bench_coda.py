"""CODA's cost at classifier-zoo scale: one ``zoorank ask`` round (:func:`coda_next`, k picks, the
product defaults: the authors' scale, ``MAX_CANDIDATES`` candidates, ``GRID`` cells, the prior
built inside as ``coda_batch`` does) and :func:`coda_belief`, wall time and peak memory, against
a baseline: ``zoorank/metrics/active/coda.py`` of another git revision (``--baseline-rev``) imported from
a temp dir. The baseline's code has no authors' scale (it took a temperature T, a label adding 1),
so the like-for-like rows run this tree at that scale (``scale = 1 / T``, ``label_weight = 1``,
T = ``--baseline-temperature``) and compare the picks for equality; the product rows time this
tree at its defaults.

Each measurement runs in a fresh child process (:func:`harness.run_child`): its wall time is the
call's (:func:`harness.timed`), its memory the child's peak RSS over the peak it had once its
inputs were built (``ru_maxrss``, the harness's one way), so the input P (M · N · K · 8 bytes) is
not counted.

Zoo: M models of graded accuracy (``linspace(0.55, 0.85, M)``) on N images of K classes, the
true class uniform; a model's logits are standard normal noise, its target class (the true class
with probability its accuracy, else a uniform other class) lifted above the noise's maximum by an
Exponential(1) gap, then softmax: the target is the top-1. Seeded (``--seed``). The labels: the
first ``--labels`` images, with their consensus class.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/performance/bench_coda.py --configs 16x10,32x10 \
        --n 10000 --k 20 --baseline-rev ef79509

``--baseline-k``: picks of the baseline's round when its full round is too slow (its round is then
its prior's time plus its per-pick time scaled to k picks, said so in the table; the equality
check is on those first picks); 0: no baseline for that configuration.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness
import harness
import numpy as np

from zoorank.metrics.active import coda

TITLE = "bench_coda — CODA's `zoorank ask` round and class-mix score at classifier-zoo scale"


def synthetic_zoo(m: int, n: int, k: int, seed: int) -> np.ndarray:
    """(M, N, K) softmax predictions of M models of graded accuracy (the module's docstring)."""
    rng = np.random.default_rng(seed)
    y = rng.integers(k, size=n)
    out = np.empty((m, n, k))
    for j, acc in enumerate(np.linspace(0.55, 0.85, m)):
        z = rng.standard_normal((n, k))
        target = np.where(rng.random(n) < acc, y, (y + rng.integers(1, k, size=n)) % k)
        z[np.arange(n), target] = z.max(axis=1) + rng.exponential(1.0, size=n)
        z = np.exp(z - z.max(axis=1, keepdims=True), out=z)
        out[j] = z / z.sum(axis=1, keepdims=True)
    return out


def baseline_module(rev: str):
    """``zoorank/metrics/active/coda.py`` at git revision ``rev``, imported as a module of its own."""
    src = subprocess.run(["git", "show", f"{rev}:zoorank/metrics/active/coda.py"], cwd=harness.REPO,
                         check=True, capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "coda_baseline.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("coda_baseline", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def child(args: argparse.Namespace) -> None:
    """One measurement (``--child WHAT``), printed as one JSON line: the call's seconds, its
    memory over the inputs' peak (MB), the picks of a round (or the score of a belief)."""
    m, kk = (int(v) for v in args.configs.split("x"))
    P = synthetic_zoo(m, args.n, kk, args.seed)
    labelled = np.arange(args.labels)
    labels = P.mean(axis=0)[labelled].argmax(axis=1)
    old = {"scale": 1.0 / args.baseline_temperature, "label_weight": 1.0}
    base = baseline_module(args.baseline_rev) if args.child.startswith("baseline") else None
    before = harness.peak_rss()
    out: dict = {}
    if args.child == "round":  # the product: defaults, prior built inside
        got, seconds = harness.timed(coda.coda_next, P, labelled, labels, k=args.k, seed=1)
    elif args.child == "round-old-scale":
        prior, t_prior = harness.timed(coda.coda_prior, P, **old)
        got, t = harness.timed(coda.coda_next, P, labelled, labels, k=args.picks, seed=1,
                               prior=prior)
        seconds = t_prior + t * args.k / args.picks  # a partial round: its picks scaled to k
    elif args.child == "baseline-round":
        _, t_prior = harness.timed(base.coda_prior, P)
        got, t = harness.timed(base.coda_next, P, labelled, labels, k=args.picks, seed=1)
        # a partial round: the prior (built inside, timed apart) plus its picks scaled to k
        seconds = t if args.picks == args.k else t_prior + (t - t_prior) * args.k / args.picks
    elif args.child in ("belief", "belief-old-scale", "baseline-belief"):
        module = base or coda
        prior = (module.coda_prior(P, **old) if args.child == "belief-old-scale"
                 else module.coda_prior(P))
        before = harness.peak_rss()
        (got, _), seconds = harness.timed(module.coda_belief, prior, labelled, labels)
    else:
        raise SystemExit(f"--child {args.child!r}?")
    out.update(seconds=seconds, mb=(harness.peak_rss() - before) / 2**20,
               values=np.asarray(got).tolist())
    print(json.dumps(out))


def measure(args: argparse.Namespace, cfg: str, what: str, picks: int) -> dict:
    """``child`` ``what`` of configuration ``cfg`` in a fresh process."""
    cmd = [sys.executable, __file__, "--child", what, "--configs", cfg, "--n", str(args.n),
           "--k", str(args.k), "--picks", str(picks), "--labels", str(args.labels),
           "--seed", str(args.seed), "--baseline-rev", args.baseline_rev,
           "--baseline-temperature", str(args.baseline_temperature)]
    run = harness.run_child(cmd)
    return json.loads(run.output.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--configs", default="16x10,32x10,16x200",
                   help="MxK pairs, comma-separated")
    p.add_argument("--n", type=int, default=10_000)
    p.add_argument("--k", type=int, default=20, help="picks of a round")
    p.add_argument("--baseline-k", default="", help="MxK=picks,... baseline picks per config")
    p.add_argument("--baseline-rev", default="ef79509",
                   help="git revision of the baseline's coda.py (default: the code before the "
                   "round's speed-ups)")
    p.add_argument("--baseline-temperature", type=float, default=0.05,
                   help="the baseline's default temperature (its prior's scale)")
    p.add_argument("--labels", type=int, default=20, help="labelled images (consensus class)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--child", default="", help=argparse.SUPPRESS)
    p.add_argument("--picks", type=int, default=0, help=argparse.SUPPRESS)
    harness.results_option(p, "bench_coda")
    args = p.parse_args()
    if args.child:
        child(args)
        return
    base_k = dict(item.split("=") for item in args.baseline_k.split(",") if item)
    report = harness.Report()
    report.say(f"baseline: zoorank/metrics/active/coda.py at {args.baseline_rev} (T = "
               f"{args.baseline_temperature:g}); N = {args.n}, k = {args.k}, "
               f"{coda.MAX_CANDIDATES} candidates, grid {coda.GRID}; product defaults s = "
               f"{coda.SCALE:g}, α = {coda.STRENGTH:g}, η = {coda.LABEL_WEIGHT:g}, look-ahead "
               f"{coda.LOOKAHEAD:g}\n")
    head = ["M", "K", "call", "baseline s", "this s", "speed-up", "baseline MB", "this MB",
            "outputs"]
    rows = []
    for cfg in args.configs.split(","):
        m, kk = (int(v) for v in cfg.split("x"))
        kb = int(base_k.get(cfg, args.k))
        new = []
        product = measure(args, cfg, "round", args.k)
        new.append([m, kk, f"round k={args.k}, product defaults", "", f"{product['seconds']:.2f}",
                    "", "", f"{product['mb']:.0f}", ""])
        belief = measure(args, cfg, "belief", 0)
        new.append([m, kk, "coda_belief, product defaults", "", f"{belief['seconds']:.2f}", "",
                    "", f"{belief['mb']:.0f}", ""])
        if kb:
            this = measure(args, cfg, "round-old-scale", kb)
            base = measure(args, cfg, "baseline-round", kb)
            scaled = "" if kb == args.k else f" ({kb} picks scaled)"
            new.append([m, kk, f"round k={args.k}, T = {args.baseline_temperature:g}",
                        f"{base['seconds']:.2f}{scaled}", f"{this['seconds']:.2f}{scaled}",
                        f"{base['seconds'] / this['seconds']:.1f}×", f"{base['mb']:.0f}",
                        f"{this['mb']:.0f}",
                        "identical picks" if this["values"] == base["values"] else "PICKS DIFFER"])
            tb = measure(args, cfg, "baseline-belief", 0)
            to = measure(args, cfg, "belief-old-scale", 0)
            diff = float(np.abs(np.asarray(tb["values"]) - np.asarray(to["values"])).max())
            new.append([m, kk, f"coda_belief, T = {args.baseline_temperature:g}",
                        f"{tb['seconds']:.2f}", f"{to['seconds']:.2f}",
                        f"{tb['seconds'] / to['seconds']:.1f}×", f"{tb['mb']:.0f}",
                        f"{to['mb']:.0f}", "identical" if diff == 0 else f"max |Δ| {diff:.1e}"])
        print(harness.table(head, new, "rrlrrrrrl"), flush=True)
        rows += new
    report.say(harness.table(head, rows, "rrlrrrrrl"))
    report.write(args.markdown, TITLE)


if __name__ == "__main__":
    main()
