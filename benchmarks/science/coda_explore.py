"""CODA with an exploration share on the shift benchmark (benchmarks/results/coda_labels.md,
section 6): the tables of the pre-registered choice of ε, read from the label traces that
``shift_benchmark.py`` cached (it computes nothing new).

Per domain and method: labels until the pick stays within ``--epsilon`` pp of the best (mean
with censored runs counting as ``--max-labels`` + 5, median, runs that reached it), the paired
differences random − method and method − CODA (mean ± SE over seeds), and the pick's regret
after 10, 25, 50 and 100 labels. Then the development criterion: the mean over the development
domains of each candidate's mean labels, the lowest winning (ties within 0.05 labels: the
smaller ε)::

    PYTHONPATH=. .venv/bin/python benchmarks/science/coda_explore.py --seeds 20 \\
        --domains impulse_noise-s1 pixelate-s1 --criterion
    PYTHONPATH=. .venv/bin/python benchmarks/science/coda_explore.py --seeds 60 \\
        --domains motion_blur-s1

Section 6b's second look (``CODA ε=0``: plain CODA with independent per-seed candidate streams,
against random; the verdict at ``--bound`` standard errors)::

    PYTHONPATH=. .venv/bin/python benchmarks/science/coda_explore.py --seeds 120 \\
        --domains motion_blur-s1 --verdict "CODA ε=0" --bound 2.59
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness
import harness
import numpy as np
from shift_benchmark import CACHE, RANDOM_CODA, labels_to_within, paired, regret_after, top1

TITLE = "CODA on the shift benchmark: labels to a near-best pick from the cached traces"

#: the candidates of the protocol, by ε (ε = 1: random draws with CODA's pick).
CANDIDATES = {0.0: "CODA", 0.25: "CODA ε=0.25", 0.5: "CODA ε=0.5", 1.0: RANDOM_CODA}
#: plain CODA with each step's candidates seeded 1000 · s + labels so far (section 6b).
CODA_INDEPENDENT = "CODA ε=0"
REGRET_AT = (10, 25, 50, 100)


def traces(folder: Path, domain: str, method: str, tag: str, seeds: int, first: int = 0
           ) -> list | None:
    """Cached traces ``first`` .. ``seeds`` − 1 of ``method`` on ``domain``; None when fewer
    exist."""
    path = folder / f"labels-{domain}-{tag}-{method.replace(' ', '_')}.json"
    if not path.exists():
        return None
    tr = json.loads(path.read_text())
    return tr[first:seeds] if len(tr) >= seeds else None


def _pm(diff: tuple[float, float, float]) -> str:
    return f"{diff[0]:+.1f} ± {diff[1]:.1f}"


def domain_table(folder: Path, domain: str, args: argparse.Namespace) -> tuple[str, dict]:
    """The markdown table of one domain and each method's mean labels (censored = cap)."""
    d = np.load(folder / f"{domain}.npz")
    truth = top1(d["probs"], d["labels"])
    cap = args.max_labels + 5
    methods = [*CANDIDATES.values(), CODA_INDEPENDENT, "random"]
    need = {}
    for m in methods:
        tr = traces(folder, domain, m, args.tag, args.seeds, args.first_seed)
        if tr is not None:
            need[m] = (np.minimum([labels_to_within(t, truth, args.epsilon) for t in tr], cap), tr)
    head = ["method", "labels to ≤ 0.5 pp: mean", "median", "reached",
            "random − method (paired ± SE)", "method − CODA (paired ± SE)",
            *(f"regret @{n}" for n in REGRET_AT)]
    rows = []
    means = {}
    for m, (v, tr) in need.items():
        means[m] = float(v.mean())
        med = np.median(v)
        d_rand = _pm(paired(v, need["random"][0], cap)) if "random" in need else "—"
        d_coda = _pm(paired(need["CODA"][0], v, cap)) if "CODA" in need else "—"
        shown = f">{args.max_labels}" if med > args.max_labels else f"{med:g}"
        reg = [np.nanmean([regret_after(t, truth, n) for t in tr]) for n in REGRET_AT]
        reached = f"{int((v <= args.max_labels).sum())}/{len(v)}"
        rows.append([m, f"{v.mean():.1f}", shown, reached, d_rand, d_coda,
                     *(f"{r:.2f}" for r in reg)])
    lines = [harness.table(head, rows, "l" * len(head))]
    best = float(truth.max())
    if args.verdict:
        mean, se, _ = paired(need[args.verdict][0], need["random"][0], cap)
        z = mean / se
        lines += ["", f"random − {args.verdict}: {mean:+.2f} ± {se:.2f} labels, z = {z:.2f} "
                  f"(bound {args.bound:g}): {'met' if mean > 0 and z >= args.bound else 'not met'}"]
    title = (f"**{domain}** (seeds {args.first_seed}–{args.seeds - 1}; best model "
             f"{100 * best:.1f}%, "
             f"runner-up {100 * np.sort(truth)[-2]:.1f}%; censored = {cap})")
    return title + "\n\n" + "\n".join(lines), means


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--domains", nargs="+", required=True)
    p.add_argument("--seeds", type=int, default=20)
    p.add_argument("--max-labels", type=int, default=100)
    p.add_argument("--epsilon", type=float, default=0.5, help="pp of the best that a pick may miss")
    p.add_argument("--tag", default="m100-c100-g128-perm", help="the label caches' settings")
    p.add_argument("--folder", type=Path, default=CACHE / "98158ef" / "predictions-n1000-s1000")
    p.add_argument("--criterion", action="store_true", help="print the development criterion")
    p.add_argument("--first-seed", type=int, default=0, help="read seeds first-seed .. seeds − 1")
    p.add_argument("--verdict", help="a method: its paired difference from random in SEs")
    p.add_argument("--bound", type=float, default=2.0, help="SEs the verdict needs")
    p.add_argument("--markdown", type=Path, help="also write the printed tables here, under the "
                   "harness header (default: print only; results/coda_labels.md holds the "
                   "hand-written reading)")
    args = p.parse_args()
    report = harness.Report()
    all_means = {}
    for dom in args.domains:
        text, means = domain_table(args.folder, dom, args)
        all_means[dom] = means
        report.say(text + "\n")
    if args.criterion:
        score = {eps: float(np.mean([all_means[d][m] for d in args.domains]))
                 for eps, m in CANDIDATES.items() if all(m in all_means[d] for d in args.domains)}
        low = min(score.values())
        winner = min(eps for eps, v in score.items() if v <= low + 0.05)
        rows = []
        for eps, v in score.items():
            m = CANDIDATES[eps]
            mark = "**" if eps == winner else ""
            rows.append([f"{m} (ε = {eps:g})", *(f"{all_means[d][m]:.1f}" for d in args.domains),
                         f"{mark}{v:.2f}{mark}"])
        report.say(harness.table(["candidate", *args.domains, "mean (criterion)"], rows,
                                 "l" * (len(args.domains) + 2)))
        report.say(f"\nwinner: ε = {winner:g} ({CANDIDATES[winner]})")
    if args.markdown:
        report.write(args.markdown, TITLE)


if __name__ == "__main__":
    main()
