"""Width-normalised RankMe variants (registry ``rankme_norm``, ``rankme_proj``) and the width
confound they address."""

import numpy as np
import pytest

from zoorank.config import ScoreOptions
from zoorank.metrics import registry
from zoorank.metrics.label_free.rankme import PROJECTION_DIM, rankme
from zoorank.metrics.primary import WIDTH_SENSITIVE


def _iso(n: int, d: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, d))


def _value(name: str, Z: np.ndarray, seed: int = 0) -> float:
    return registry.info(name).run(Z, ScoreOptions(), seed)[0]


def test_rankme_norm_is_rankme_divided_by_the_width():
    Z = _iso(500, 48)
    assert _value("rankme_norm", Z) == pytest.approx(rankme(Z, eps=1e-7) / 48)
    assert 0 < _value("rankme_norm", Z) <= 1


def test_rankme_grows_with_width_and_the_normalised_variants_do_not():
    # isotropic embeddings of width 64 and 256 are equally "good": RankMe orders them by width
    narrow, wide = _iso(2000, 64), _iso(2000, 256, seed=1)
    assert rankme(wide) > 2.5 * rankme(narrow)
    assert _value("rankme_norm", wide) == pytest.approx(_value("rankme_norm", narrow), rel=0.15)
    assert _value("rankme_proj", wide) == pytest.approx(_value("rankme_proj", narrow), rel=0.05)
    assert _value("rankme_proj", wide) <= PROJECTION_DIM


def test_rankme_proj_uses_the_same_projection_for_every_model_of_a_width():
    Z = _iso(300, 32)
    assert _value("rankme_proj", Z, seed=3) == _value("rankme_proj", Z.copy(), seed=3)


def test_width_sensitive_metrics_are_registered_and_the_variants_are_not():
    assert {"rankme", "twonn_id", "mle_id", "coding_rate"} <= WIDTH_SENSITIVE
    assert not {"rankme_norm", "rankme_proj"} & WIDTH_SENSITIVE
    assert registry.expand(["rankme_norm"]) == ["rankme_norm"]
