"""``shortlist_for`` (zoorank.decide.shortlist) on real leaderboards written by RANK, and the
calibration record it reads (zoorank/decide/shortlist_record.json)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from decision_fixtures import ranked_board

from zoorank.decide import shortlist as S
from zoorank.stats.health import BLOCKING

KEYS = {"models", "metric", "rule", "text", "hits", "zoos", "hit_rate", "mean_size",
        "mean_size_fraction", "held_out_zoos", "all_hits", "all_zoos", "pick_regret_pp", "kind",
        "kind_covered", "coverage_note"}
HELD_OUT = ["h1", "h2", "h3", "h4"]


@pytest.fixture(scope="module")
def one_dataset(tmp_path_factory):
    return ranked_board(tmp_path_factory.mktemp("shortlist-one"), ("digits",))


@pytest.fixture(scope="module")
def two_datasets(tmp_path_factory):
    return ranked_board(tmp_path_factory.mktemp("shortlist-two"), ("digits", "digits-b"))


def _entry(rule, **figures):
    # 9 of 10 zoos in all, of which 3 of the 4 held out: only the held-out ones are reported as such
    base = {"rule": rule, "text": "a rule", "hits": 9, "zoos": 10, "hit_rate": 0.9,
            "mean_size": 3.0, "mean_size_fraction": 0.3, "held_out_zoos": 4,
            "held_out": {"hits": 3, "zoos": 4, "names": HELD_OUT},
            "pick_regret_pp": {"median": 0.4, "p90": 1.5, "zoos": 4},
            "kinds": ["SSL encoders", "encoders"], "board_kinds": ["encoders"], **figures}
    base["rank_rule"] = {**base, "rule": {"kind": "rank_count", "k": 3}, "text": "the rank rule",
                         "hits": 8, "zoos": 10, "hit_rate": 0.8,
                         "held_out": {"hits": 2, "zoos": 4, "names": HELD_OUT}}
    return base


@pytest.fixture
def record(monkeypatch):
    """Replace the installed record by one of known rules (the function reads it through
    ``load_record``)."""
    def use(metrics):
        monkeypatch.setattr(S, "load_record", lambda: {"metrics": metrics, "zoos": {}})
        # and no calibration record by unit (the shipped one would set the rule of its metric)
        monkeypatch.setattr(S, "settings_record", lambda settings: None)
    return use


def _eligible_in_order(board: pd.DataFrame) -> pd.DataFrame:
    b = board[board["rank"].notna()].sort_values("rank", kind="stable")
    blocked = [bool({f.split(":")[-1] for f in str(fl or "").split(",") if f} & BLOCKING)
               for fl in b["flags"]]
    return b[~np.array(blocked, dtype=bool)]


def test_a_rank_rule_keeps_the_first_eligible_models_and_copies_the_record(one_dataset, record):
    board, settings = one_dataset
    assert settings["primary_metric"] == {"digits": "rankme"}
    record({"rankme": _entry({"kind": "rank_count", "k": 2, "max_fraction": 0.5})})
    got = S.shortlist_for(board, settings)
    assert set(got) == KEYS
    eligible = _eligible_in_order(board)
    assert "collapsed" not in set(eligible["model_id"])  # the fixture's collapsed model is flagged
    assert got["models"] == list(eligible["model_id"][:2])
    assert got["metric"] == "rankme"
    # the held-out zoos' figures, never the calibration zoos' (those stand beside as all_*)
    assert (got["hits"], got["zoos"], got["hit_rate"], got["held_out_zoos"]) == (3, 4, 0.75,
                                                                                 HELD_OUT)
    assert (got["all_hits"], got["all_zoos"]) == (9, 10)
    assert got["pick_regret_pp"] == {"median": 0.4, "p90": 1.5, "zoos": 4}
    assert got["kind"] == "encoders" and got["kind_covered"] and got["coverage_note"] is None


def test_a_band_rule_reads_the_metrics_values(one_dataset, record):
    board, settings = one_dataset
    rule = {"kind": "band", "width": 0.5, "units": "sd", "max_fraction": 1.0}
    record({"rankme": _entry(rule)})
    got = S.shortlist_for(board, settings)
    eligible = _eligible_in_order(board)
    v = eligible["digits/rankme"].to_numpy(dtype=np.float64)
    keep = v.max() - v <= 0.5 * v.std() + 1e-9 * max(1, v.max())  # rankme: higher is better
    assert got["models"] == list(eligible["model_id"][keep])
    assert got["rule"] == rule


def test_a_metric_without_a_record_gets_half_the_board_unmeasured(one_dataset, record):
    board, settings = one_dataset
    record({})
    got = S.shortlist_for(board, settings)
    eligible = _eligible_in_order(board)
    n = len(eligible)
    assert got["models"] == list(eligible["model_id"][:max(1, n // 2)])
    assert got["rule"] == S.FALLBACK_RULE
    assert all(got[k] is None for k in ("hits", "zoos", "hit_rate", "mean_size",
                                        "mean_size_fraction"))
    assert got["held_out_zoos"] == []
    assert got["pick_regret_pp"] == {"median": None, "p90": None, "zoos": None}
    assert "no measured record" in got["text"]
    assert got["kind_covered"] is False and "unmeasured" in got["coverage_note"]


def test_a_board_of_two_datasets_uses_the_rank_rule_on_its_aggregate_rank(two_datasets, record):
    board, settings = two_datasets
    record({"rankme": _entry({"kind": "band", "width": 0.1, "units": "sd"})})
    got = S.shortlist_for(board, settings)
    assert got["rule"] == {"kind": "rank_count", "k": 3}
    assert got["models"] == list(_eligible_in_order(board)["model_id"][:3])
    assert (got["hits"], got["hit_rate"]) == (2, 0.5)  # the rank rule's own held-out figures
    assert "several datasets" in got["coverage_note"]


def test_nan_ranks_and_values_are_never_shortlisted(one_dataset, record):
    board, settings = one_dataset
    b = board.copy()
    first = _eligible_in_order(b)["model_id"].iloc[0]
    b.loc[b["model_id"] == first, "digits/rankme"] = np.nan
    record({"rankme": _entry({"kind": "band", "width": 2.0, "units": "sd"})})
    assert first not in S.shortlist_for(b, settings)["models"]
    b = board.copy()
    b.loc[b["model_id"] == first, "rank"] = np.nan
    record({"rankme": _entry({"kind": "rank_count", "k": 1})})
    got = S.shortlist_for(b, settings)["models"]
    assert got == [_eligible_in_order(board)["model_id"].iloc[1]]


def test_kind_is_inferred_from_heads_and_families_and_uncovered_kinds_say_so(record):
    heads = pd.DataFrame({"model_id": ["a", "b", "c", "d"], "rank": [1.0, 2.0, 3.0, 4.0],
                          "signal": ["head"] * 4, "family": ["cnn"] * 4, "flags": [""] * 4,
                          "val/nuclear_norm_accuracy": [0.8, 0.7, 0.6, 0.5]})
    settings = {"primary_metric": {"val": "nuclear_norm_accuracy"}}
    record({"nuclear_norm_accuracy": _entry({"kind": "rank_count", "k": 1},
                                            kinds=["SSL encoders", "encoders"],
                                            board_kinds=["encoders"])})
    got = S.shortlist_for(heads, settings)
    assert got["models"] == ["a"]
    assert got["kind"] == "classifiers" and not got["kind_covered"]
    assert got["coverage_note"] == ("No validation zoo covers classifiers: the shortlist's rate is "
                                    "measured on SSL encoders, encoders.")
    aes = heads.assign(signal="embedding", family="autoencoder").rename(
        columns={"val/nuclear_norm_accuracy": "val/rankme"})
    record({"rankme": _entry({"kind": "rank_count", "k": 2})})
    got = S.shortlist_for(aes, {"primary_metric": {"val": "rankme"}})
    assert got["kind"] == "autoencoders" and not got["kind_covered"]
    assert S.board_kind(aes.assign(family="simclr")) == ("encoders", "SSL encoders")


def test_an_empty_board_has_an_empty_shortlist(record):
    record({})
    got = S.shortlist_for(pd.DataFrame({"model_id": [], "rank": []}), {})
    assert got["models"] == [] and set(got) == KEYS


# -- the installed record --------------------------------------------------------------------------

def test_the_installed_record_is_consistent():
    rec = S.load_record()
    assert rec.get("metrics"), "the package ships zoorank/decide/shortlist_record.json"
    for metric, e in rec["metrics"].items():
        for part in (e, e["rank_rule"]):
            lo, ho = part["leave_one_out"], part["held_out"]
            assert part["hits"] == lo["hits"] + ho["hits"]
            assert part["zoos"] == lo["zoos"] + ho["zoos"]
            assert part["held_out_zoos"] == ho["zoos"] == len(e["held_out_zoo_names"])
            assert math.isclose(part["hit_rate"], part["hits"] / part["zoos"])
            assert 0 < part["mean_size_fraction"] <= 0.5 + 1e-9
            assert part["rule"]["max_fraction"] == 0.5
            assert S.rule_text(part["rule"], metric) == part["text"]
        assert e["rank_rule"]["rule"]["kind"] in ("rank_count", "rank_fraction")
        names = set(rec["zoos"])
        assert set(e["calibration_zoos"]) | set(e["held_out_zoo_names"]) <= names
        assert not set(e["calibration_zoos"]) & set(e["held_out_zoo_names"])
        assert all(rec["zoos"][z]["held_out"] for z in e["held_out_zoo_names"])


def test_the_record_is_package_data():
    from pathlib import Path

    import tomllib

    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    from fnmatch import fnmatch

    data = pyproject["tool"]["setuptools"]["package-data"]
    patterns = [*data.get("zoorank.decide", []), *data.get("*", [])]
    assert any(fnmatch(S.RECORD, p) for p in patterns), patterns


def test_the_installed_conformal_fraction_is_its_scores_order_statistic():
    rec = S.load_record()
    assert rec.get("protocol") == 2, "the shipped record is protocol 2's (split conformal)"
    for e in rec["metrics"].values():
        c = e["conformal"]
        scores = sorted(math.inf if v is None else v for v in c["scores"].values())
        m = len(scores)
        assert m == c["calibration_zoos"] == len(e["calibration_zoos"])
        k = math.ceil((m + 1) * (1 - c["alpha"]) - 1e-12)  # split conformal, level 1 − α
        assert c["order_statistic"] == k
        f = scores[k - 1] if k <= m else math.inf
        assert (c["fraction"] is None) == (not math.isfinite(f))
        assert e["rule"]["fraction"] == pytest.approx(min(f, 0.5))
        assert c["guaranteed"] == (f <= 0.5)
        # in sample, the rule holds every calibration zoo whose score is at most its fraction
        assert e["in_sample"]["hit_rate"] == pytest.approx(
            sum(s <= e["rule"]["fraction"] + 1e-12 for s in scores) / m)
