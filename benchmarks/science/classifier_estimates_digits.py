"""Label-free accuracy estimates on a small real classifier zoo under shift (issue 31, item 3).

Zoo: 8 scikit-learn logistic regressions on real digits (1797 images, 8 × 8), graded by training
size (20 to 1000 images) and input (all 64 pixels or the top 24 / 40 rows of pixels), trained on
digits 300..; evaluated on digits 0..300 with seeded Gaussian pixel noise of σ in {0, 20, 40, 60,
80} (0..255 scale; σ 0 is the source). Truth: each head's top-1 on each domain. For every
estimator of ``zoorank.metrics.heads.classifier``: Kendall τ against the truth over the zoo and the mean
absolute error (pp), per domain and averaged over the shifted domains. A sanity check of the
implementations on real heads, not the shift benchmark (that is ``benchmarks/science/shift_benchmark.py``).

    PYTHONPATH=. .venv/bin/python benchmarks/science/classifier_estimates_digits.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness
import harness
import numpy as np
from scipy import stats
from sklearn.datasets import load_digits
from sklearn.linear_model import LogisticRegression

from zoorank.metrics.heads import classifier as est

N = 300
ZOO = {f"lr{t}-{p}": (t, p) for t in (20, 50, 200, 1000) for p in (64, 40)}
SIGMAS = (0, 20, 40, 60, 80)
SOURCE_SIGMA = 0


def main() -> None:
    args = harness.options(__doc__, "classifier_estimates_digits")
    start = time.perf_counter()
    d = load_digits()
    X, y = d.data / 16, d.target
    heads = {}
    for name, (train, pixels) in ZOO.items():
        rows = np.concatenate([np.flatnonzero(y[N:] == c)[:train // 10] for c in range(10)]) + N
        heads[name] = LogisticRegression(max_iter=3000).fit(X[rows, :pixels], y[rows])
    domains = {}
    for s in SIGMAS:
        noisy = np.clip(d.images[:N] * 255 / 16 + np.random.default_rng(7).normal(0, s, (N, 8, 8)),
                        0, 255).round().reshape(N, 64) / 255
        domains[s] = {m: heads[m].decision_function(noisy[:, :ZOO[m][1]]) for m in ZOO}
    y_t = y[:N]
    src = domains[SOURCE_SIGMA]
    names = list(ZOO)
    table: dict[str, dict[int, tuple[float, float]]] = {}
    for s, logits in domains.items():
        truth = np.array([np.mean(logits[m].argmax(1) == y_t) for m in names])
        preds = np.vstack([logits[m].argmax(1) for m in names])
        values = {
            "average_confidence": [est.average_confidence(logits[m]) for m in names],
            "doc_accuracy": [est.doc_accuracy(logits[m], src[m], y_t) for m in names],
            "atc_accuracy": [est.atc_accuracy(logits[m], src[m], y_t) for m in names],
            "atc_accuracy (MC)": [est.atc_accuracy(logits[m], src[m], y_t, score="max_confidence")
                                  for m in names],
            "nuclear_norm_accuracy": [est.nuclear_norm_accuracy(logits[m]) for m in names],
            "cot_accuracy": [est.cot_accuracy(logits[m], y_t) for m in names],
            "consensus_agreement": list(est.consensus_agreement(preds, 10)),
            "dawid_skene_accuracy": list(est.dawid_skene_accuracy(preds, 10)),
        }
        for k, v in values.items():
            v = np.asarray(v)
            table.setdefault(k, {})[s] = (float(stats.kendalltau(v, truth)[0]),
                                          float(100 * np.mean(np.abs(v - truth))))
        print(f"σ {s:>2}: true top-1 {truth.min():.3f}..{truth.max():.3f}")
    shifted = [s for s in SIGMAS if s != SOURCE_SIGMA]
    rows = [[k, *(f"{row[s][0]:+.2f} / {row[s][1]:.1f}" for s in SIGMAS),
             f"{np.mean([row[s][0] for s in shifted]):+.2f} / "
             f"{np.mean([row[s][1] for s in shifted]):.1f}"] for k, row in table.items()]
    body = "\n".join([
        "8 logistic-regression heads on real digits, N = 300 target images, Gaussian pixel "
        "noise σ; source = σ 0 (DoC, ATC, COT calibrate on it). Cells: Kendall τ against "
        "true top-1 / MAE (pp).", "",
        harness.table(["estimator", *(f"σ {s}" for s in SIGMAS), "mean over shifted"], rows,
                      "l" * (len(SIGMAS) + 2)),
        "", f"{time.perf_counter() - start:.1f} s."])
    print(body)
    harness.write_results(args.markdown, "classifier_estimates_digits — label-free accuracy "
                          "estimates of a digits zoo under pixel noise", body)


if __name__ == "__main__":
    main()
