"""Helpers the few-label metrics' tests share: a reference softmax and a seeded digits split."""

from __future__ import annotations

import numpy as np


def softmax_rows(a):
    out = np.empty_like(a)
    for i, row in enumerate(a):
        e = np.exp(row - row.max())
        out[i] = e / e.sum()
    return out


def digits_split(digits, n_train=1200):
    """A seeded split of the digits' pixels: (train X, train y, test X, test y)."""
    images, labels = digits
    X = images.reshape(len(images), -1)
    perm = np.random.default_rng(0).permutation(len(X))
    tr, te = perm[:n_train], perm[n_train:]
    return X[tr], labels[tr], X[te], labels[te]
