"""End to end on real images: embed → score → rank → report over a zoo with a known ordering.

The zoo (``tests/e2e_models.py``): one small CNN at random init, briefly trained on digits, and
collapsed to a constant; a random projection of the pixels; and two rotated copies of the trained
CNN forming a seed ensemble. Datasets: scikit-learn digits and, when ``../shared/data`` is present,
a CIFAR-10 test subset. One run is shared by every assertion (module fixture); a second run must be
a no-op.
"""

from __future__ import annotations

import re
import warnings
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from deltalake import DeltaTable
from scipy import stats

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
COLLAPSE_METRICS = ("rankme", "lidar", "twonn_id")


def _config(root: Path, files: dict[str, str]) -> dict:
    import e2e_models as zoo

    def model(model_id: str, **extra) -> dict:
        return {"id": model_id, "source": "torchscript", "name": files[model_id],
                "trust_checkpoint": True,
                "input_size": zoo.INPUT_SIZE, "interpolation": "bilinear", "crop_pct": 1.0,
                **extra}

    datasets = [{"name": "digits", "source": "sklearn_digits", "limit": 300}]
    cifar = SHARED_DATA / "cifar10" / "test.parquet"
    if cifar.is_file():
        datasets.append({"name": "cifar10", "source": "parquet", "path": str(cifar),
                         "image_column": "image", "label_column": "label", "limit": 200})
    return {
        "store": str(root / "store"),
        "seed": 0,
        "datasets": datasets,
        "models": [
            model("random", family="cnn"),
            model("trained", family="cnn"),
            model("collapsed", family="cnn"),
            model("pixels", family="baseline"),
            model("rot-0", family="cnn", group="rotated"),
            model("rot-1", family="cnn", group="rotated"),
        ],
        "views": [{"name": "clean"}, {"name": "simclr", "samples": 60, "per_sample": 4}],
        "metrics": ["rankme", "lidar", "twonn_id", "cluster_learnability", "clid", "nc",
                    "uniformity"],
        "embed": {"batch_size": 128},
        "score": {"nc_k": 10, "nc_reference_size": 100, "max_samples": 300},
        "oracle": {"knn": True, "linear_probe": True, "recall_at_1": True, "r_auroc": True,
                   "loss_data_curve": True, "loss_data_points": 3, "loss_data_seeds": 1,
                   "loss_data_steps": 50, "sdl_eps": [0.5]},
        "rank": {"primary_metric": "rankme", "bootstrap": 200},
    }


def _snapshot(root: Path) -> dict[str, tuple[int, bytes]]:
    return {str(p.relative_to(root)): (p.stat().st_mtime_ns, p.read_bytes())
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def run(tmp_path_factory, ray_session, e2e_zoo):
    import yaml

    from zoorank.config.loading import load_config
    from zoorank.pipeline import run_all

    root = tmp_path_factory.mktemp("e2e")
    files = e2e_zoo
    path = root / "run.yaml"
    path.write_text(yaml.safe_dump(_config(root, files)))
    config = load_config(path)
    index = run_all(config)
    store = Path(config.store)
    first = _snapshot(store)
    run_all(config)
    second = _snapshot(store)
    board = DeltaTable(str(store / "leaderboard")).to_pandas()
    return {"config": config, "store": store, "board": board, "index": index,
            "first": first, "second": second}


def _datasets(run) -> list[str]:
    return [d.name for d in run["config"].datasets]


def test_every_model_is_on_the_leaderboard(run):
    assert sorted(run["board"]["model_id"]) == sorted(m.id for m in run["config"].models)
    failed = DeltaTable(str(run["store"] / "failed")).to_pandas()
    assert failed.empty, failed


@pytest.mark.parametrize("metric", COLLAPSE_METRICS)
def test_the_collapsed_model_ranks_last(run, metric):
    board = run["board"].set_index("model_id")
    for ds in _datasets(run):
        ranks = board[f"{ds}/{metric}/rank"]
        others = ranks.drop("collapsed")
        assert ranks["collapsed"] > others.max(), (ds, ranks.to_dict())


def test_the_oracle_ranks_the_trained_model_above_the_random_one(run):
    board = run["board"].set_index("model_id")
    for oracle in ("knn_accuracy", "linear_probe_accuracy", "recall_at_1"):
        assert board.loc["trained", f"digits/{oracle}"] > board.loc["random", f"digits/{oracle}"]
    assert board.loc["trained", "digits/mdl"] < board.loc["random", "digits/mdl"]
    # the collapsed model is at chance: 10 balanced classes
    assert board.loc["collapsed", "digits/knn_accuracy"] < 0.2


def test_nc_lies_in_the_unit_interval_and_is_one_for_rotated_copies(run):
    files = sorted((run["store"] / "reliability").rglob("*.parquet"))
    assert files
    for file in files:
        nc = pd.read_parquet(file)["nc"].to_numpy()
        assert np.all((nc >= 0) & (nc <= 1)), file
    for ds in _datasets(run):
        rel = pd.read_parquet(run["store"] / "reliability" / ds / "rotated.parquet")
        np.testing.assert_allclose(rel["nc"], 1.0)
        board = run["board"].set_index("model_id")
        assert board.loc["rot-0", f"{ds}/nc"] == pytest.approx(1.0)


def test_agreement_numbers_equal_scipy_on_the_same_vectors(run):
    from zoorank.decide.leaderboard import ranking_vector

    board = run["board"]
    agree = DeltaTable(str(run["store"] / "agreement")).to_pandas()
    rows = agree[(agree.family == "all") & (agree.n_metric_nan == 0)
                 & (agree.metric != "leaderboard_rank") & (agree.kind != "prior")]
    checked = 0
    for row in rows.itertuples(index=False):
        x, direction = ranking_vector(row.metric, board[f"{row.dataset}/{row.metric}"])
        y, o_dir = ranking_vector(row.oracle_metric, board[f"{row.dataset}/{row.oracle_metric}"])
        if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
            continue
        a, b = direction * x, o_dir * y
        assert row.n_models == len(board)
        for name, fn in (("kendall_tau", stats.kendalltau), ("spearman", stats.spearmanr),
                         ("pearson", stats.pearsonr)):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # a constant vector: scipy warns and gives NaN
                expected = fn(a, b).statistic
            got = getattr(row, name)
            assert (np.isnan(got) and np.isnan(expected)) or got == pytest.approx(expected), (
                row.metric, row.oracle_metric, name)
        checked += 1
    assert checked >= 10


def test_a_rerun_is_a_no_op(run):
    first, second = run["first"], run["second"]
    assert set(first) == set(second)
    assert [k for k in first if first[k][1] != second[k][1]] == []  # same bytes everywhere
    # nothing recomputed or rewritten either (EMBED refreshes its sample lists, same bytes)
    rewritten = [k for k in first if first[k][0] != second[k][0]
                 and not k.startswith("datasets/")]
    assert rewritten == []


class _Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.images: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.images.append(dict(attrs)["src"])

    def handle_data(self, data):
        self.text.append(data)


def test_the_html_report_names_every_model_and_its_images_exist(run):
    index = Path(run["index"])
    assert index == run["store"] / "report" / "index.html"
    page = _Page()
    page.feed(index.read_text())
    text = " ".join(page.text)
    for model in run["config"].models:
        assert re.search(rf"(?<![\w-]){re.escape(model.id)}(?![\w-])", text), model.id
    assert page.images
    for src in page.images:
        assert (index.parent / src).is_file(), src
    assert any(src.startswith("reliability-") for src in page.images)


def test_every_artifact_the_stages_write_has_the_catalogs_fingerprint(run):
    """The catalog of the config equals what embed → score → rank wrote (nothing else, nothing
    missing), fingerprint for fingerprint."""
    from zoorank.catalog import build_catalog, samples_path
    from zoorank.store import Store

    config = run["config"]
    store = Store(config.store)
    catalog = build_catalog(config)
    raw = store.read_manifest()
    assert set(zip(raw["dataset"], raw["view"], raw["model_id"])) == set(catalog.entries)
    assert (raw["status"] == "done").all()
    for r in raw.itertuples(index=False):
        assert r.fingerprint in catalog.entries[(r.dataset, r.view, r.model_id)]
    manifest = catalog.fresh_manifest(raw)

    metrics = store.read_metrics()
    expected = catalog.metric_fingerprints(manifest)
    stored = {(r.model_id, r.dataset, r.metric): r.fingerprint
              for r in metrics.itertuples(index=False)}
    assert stored == expected
    assert {"clid", "clid_family", "nc", "lidar"} <= {k[2] for k in expected}

    rel = catalog.fresh_reliability(manifest, metrics)
    datasets = _datasets(run)
    assert set(rel) == set(catalog.reliability_tables(manifest)) == {
        (d, "rotated") for d in datasets}
    for d in datasets:
        assert store.list_files("reliability", d, suffix=".parquet") == ["rotated.parquet"]

    oracle = store.read_frame("oracle")
    want = catalog.oracle_fingerprints(manifest, metrics)
    assert {(r.model_id, r.dataset): r.fingerprint for r in oracle.itertuples(index=False)} == {
        k: fp for k, (fp, _) in want.items()}
    assert want[("rot-0", "digits")][1] == "rotated"  # R-AUROC reads the fresh table
    assert "r_auroc_nc" in set(oracle["metric"])

    assert catalog.stale_samples(store) == []
    for d in datasets:
        assert set(store.read_frame(samples_path(d))["fingerprint"]) == {
            catalog.labels_fingerprint(d)}
