"""The report at 2,000 models, in a real browser, and the templates' autoescaping.

The store's tables (manifest, metrics, oracle, and the leaderboard / agreement / failed tables RANK
writes, with its settings on the leaderboard's commit) are written with the store's own writers;
their values are synthetic (rendering needs no real ranking). ``run_report`` builds the page.
"""

from __future__ import annotations

import json
import os
import re
import time

import numpy as np
import pandas as pd
import pytest

from zoorank.config.loading import parse_config
from zoorank.store import Store
from zoorank.store.schema import METRICS_COLUMNS

N_MODELS = 2000
XSS = "<img src=x onerror=alert(1)>"
#: the one model far from the others in rankme (x) and kNN accuracy (y): alone under the pointer.
OUTLIER = "m-0007"


def _ids() -> list[str]:
    return [f"m-{i:04d}" for i in range(N_MODELS)]


@pytest.fixture(scope="module")
def big_report(tmp_path_factory):
    from rank_fixtures import config_dict, stamp_fingerprints

    from zoorank.catalog import build_catalog
    from zoorank.decide.leaderboard import metrics_fingerprint
    from zoorank.report import run_report
    from zoorank.store.layout import AGREEMENT, FAILED, LEADERBOARD, ORACLE

    root = tmp_path_factory.mktemp("report-2000")
    raw = config_dict(str(root), oracle={"knn": True})
    raw["models"] = [{"id": m, "source": "python", "name": "fixtures:unused",
                      "family": f"fam{i % 4}"} for i, m in enumerate(_ids())]
    config = parse_config(raw)
    store = Store(config.store)
    ids = _ids()
    rng = np.random.default_rng(0)
    rankme = rng.uniform(5.0, 20.0, N_MODELS)
    knn = 0.5 + 0.02 * rankme + rng.normal(0, 0.02, N_MODELS)
    at = ids.index(OUTLIER)
    rankme[at], knn[at] = 60.0, 0.05
    uniformity = -rng.uniform(1.0, 3.0, N_MODELS)
    store.update_manifest([{"dataset": "digits", "view": "clean", "model_id": m,
                            "fingerprint": "-", "status": "done", "error": None, "rows": 300,
                            "dim": 24, "seconds": 0.1, "bad_images": 0} for m in ids])
    row = {"dataset": "digits", "params": "{}", "n": 300, "dim": 24, "seed": 0,
           "zoorank_version": "test", "fingerprint": "-"}
    store.write_parquet("metrics", pd.DataFrame(
        [{**row, "model_id": m, "metric": "rankme", "value": v} for m, v in zip(ids, rankme)]
        + [{**row, "model_id": m, "metric": "uniformity", "value": v}
           for m, v in zip(ids, uniformity)], columns=METRICS_COLUMNS))
    stamp_fingerprints(config, store)
    store.write_parquet(ORACLE, pd.DataFrame(
        [{**row, "model_id": m, "metric": "knn_accuracy", "value": v} for m, v in zip(ids, knn)],
        columns=METRICS_COLUMNS))

    catalog = build_catalog(config)
    fresh = catalog.fresh_metrics(store, catalog.fresh_manifest(store.read_manifest()))
    order = np.argsort(-rankme, kind="stable")
    rank = np.empty(N_MODELS)
    rank[order] = np.arange(1, N_MODELS + 1)
    board = pd.DataFrame({
        "rank": rank, "rank_low": np.maximum(1, rank - 3), "rank_high": rank + 3,
        "p_best": np.where(rank <= 3, 1 / 3, 0.0), "in_top_set": rank <= 3, "model_id": ids,
        "family": [f"fam{i % 4}" for i in range(N_MODELS)], "group": "",
        "flags": np.where(rank == N_MODELS, "collapsed", ""), "aggregate": rank,
        "rank/digits": rank, "digits/rankme": rankme, "digits/uniformity": uniformity,
        "digits/knn_accuracy": knn,
    }).iloc[order].reset_index(drop=True)
    top = list(board["model_id"][:3])
    settings = {"ordered_by": "rankme", "aggregation": "mean", "primary_metric": {"digits":
                                                                                  "rankme"},
                "metrics_fingerprint": metrics_fingerprint(config, fresh),
                "decision": {"confidence": 0.95, "resamples": 100, "folds": 5,
                             "fold_fraction": 0.5, "top_set_rule": "interval", "top_set": top,
                             "consensus_sentence": "rankme and uniformity agree.",
                             "metrics_agree": True, "blocking_flags": ["collapsed"],
                             "flagged": list(board["model_id"][-1:])}}
    nan = float("nan")
    agreement = pd.DataFrame([
        {"metric": m, "oracle_metric": "knn_accuracy", "dataset": "digits", "family": "all",
         "kendall_tau": t, "kendall_ci_low": t - 0.1, "kendall_ci_high": t + 0.1,
         "labels_per_class": nan, "budget_seed": ""}
        for m, t in (("rankme", 0.6), ("uniformity", 0.1))])
    failed = pd.DataFrame([{"model_id": "m-x", "dataset": "digits", "view": "clean",
                            "stage": "embed", "error": f"CheckpointError: {XSS}"}])
    versions = {AGREEMENT: store.replace_table(AGREEMENT, agreement),
                FAILED: store.replace_table(FAILED, failed)}
    store.replace_table(LEADERBOARD, board, {"zoorank": json.dumps(settings, sort_keys=True),
                                             "zoorank_tables": json.dumps(versions)})
    store.write_bytes("leaderboard.csv", board.to_csv(index=False).encode())
    t0 = time.perf_counter()
    index = run_report(config)
    return root, index, board, time.perf_counter() - t0


@pytest.mark.slow  # the store's writers take ~45 s for 2,000 models' rows on 2 busy cores
def test_report_of_2000_models_is_one_self_contained_file_of_reasonable_size(big_report):
    from plotly.offline import get_plotlyjs

    root, index, board, seconds = big_report
    page = (root / "report" / "index.html").read_text()
    size = os.path.getsize(index)
    plotly = len(get_plotlyjs().encode())
    print(f"report of {N_MODELS} models: {size / 1e6:.2f} MB ({(size - plotly) / 1e6:.2f} MB "
          f"without plotly.js), built in {seconds:.1f} s")
    assert page.count(get_plotlyjs()) == 1  # plotly.js inline, once
    assert not re.search(r"<(script|link)[^>]+(src|href)=['\"]?(https?:|//)", page)  # no CDN
    assert size - plotly < 3_000_000  # the page's own content, 2,000 models
    # every model is in the leaderboard table (paged in the browser, all in the file)
    table = page[page.index("id='leaderboard-table'"):]
    table = table[:table.index("</table>")]
    assert table.count("<tr>") == N_MODELS + 1


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_report_of_2000_models_in_chromium_filters_pages_and_names_a_point_on_hover(big_report,
                                                                                   chromium):
    root, _, board, _ = big_report
    dialogs: list[str] = []
    page = chromium.new_page(viewport={"width": 1280, "height": 900})
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    t0 = time.perf_counter()
    page.goto((root / "report" / "index.html").as_uri(), wait_until="load")
    page.wait_for_selector("#plot-scatter-digits-knn_accuracy .scatterlayer path.point")
    loaded = time.perf_counter() - t0
    assert loaded < 60, loaded  # a sane time on 2 busy cores (about 2 s when idle)

    # pagination: the first 50 of 2,000 rows, in the leaderboard's order; next: 51–100
    rows = page.locator("#leaderboard-table tbody tr:not([hidden])")
    assert rows.count() == 50
    headline = [page.locator("#leaderboard-table thead th").nth(i).inner_text()
                for i in range(page.locator("#leaderboard-table thead th").count())]
    col = headline.index("model_id")
    first = [rows.nth(i).locator("td").nth(col).inner_text() for i in range(50)]
    assert first == list(board["model_id"][:50])
    box = page.locator("div.paged", has=page.locator("#leaderboard-table"))
    info = box.locator(".info")
    assert info.inner_text().startswith("1–50 of 2000")
    box.locator("button.next").click()
    assert info.inner_text().startswith("51–100 of 2000")
    assert rows.nth(0).locator("td").nth(col).inner_text() == board["model_id"][50]

    # the filter: one model by its id, then a family (500 models, 10 pages)
    box.locator("input.filter").fill("m-1234")
    assert rows.count() == 1
    assert rows.nth(0).locator("td").nth(col).inner_text() == "m-1234"
    assert "(filtered from 2000)" in info.inner_text()
    box.locator("input.filter").fill("fam3")
    assert rows.count() == 50 and "of 500 (filtered from 2000)" in info.inner_text()
    assert "page 1 of 10" in info.inner_text()

    # hover: the outlier point names its model, on the scatter and on the rank overview
    for plot_id in ("plot-scatter-digits-knn_accuracy", "plot-rank-overview"):
        assert _hover_label(page, plot_id, OUTLIER) == OUTLIER, plot_id

    # autoescaped: the failure's error is shown as text, no image made of it, no alert
    failed = page.locator("#failed").inner_text()
    assert XSS in failed
    assert page.locator("#failed img").count() == 0
    assert dialogs == []


def _hover_label(page, plot_id: str, model_id: str) -> str:
    """Move the mouse onto ``model_id``'s point of the first trace of plot ``plot_id``; returns
    the first line of the hover label Plotly draws."""
    plot = page.locator(f"#{plot_id}")
    plot.scroll_into_view_if_needed()
    where = plot.evaluate(
        """(gd, id) => {
            const trace = gd.querySelectorAll('.scatterlayer .trace')[0];
            const i = gd.data[0].text.indexOf(id);
            const pt = Array.from(trace.querySelectorAll('path.point'))
                .find(p => p.__data__ && p.__data__.i === i);
            const r = pt.getBoundingClientRect();
            return [r.x + r.width / 2, r.y + r.height / 2];
        }""", model_id)
    page.mouse.move(where[0] - 30, where[1] - 30)
    page.mouse.move(where[0], where[1], steps=5)
    label = plot.locator(".hoverlayer .hovertext").first
    label.wait_for(timeout=10_000)
    return label.locator("text tspan").first.text_content()


def test_templates_escape_model_ids_errors_and_warnings():
    """A model id, error or warning holding HTML is shown as text by every template."""
    from zoorank.report.decision_screen import decision_section
    from zoorank.report.page import Section, Table, inline, render_page
    from zoorank.report.sections import failed_section, leaderboard_section

    board = pd.DataFrame({"rank": [1.0, 2.0], "rank_low": [1.0, 1.0], "rank_high": [2.0, 2.0],
                          "p_best": [0.6, 0.4], "in_top_set": [True, True],
                          "model_id": [XSS, "plain"], "flags": [f"x:{XSS}", ""],
                          "digits/rankme": [3.0, 2.0]})
    settings = {"ordered_by": XSS, "primary_metric": {"digits": "rankme"},
                "decision": {"consensus_sentence": XSS, "width_warning": XSS,
                             "metrics_agree": False}}
    failed = pd.DataFrame([{"model_id": XSS, "dataset": "d", "view": "clean", "stage": "embed",
                            "error": XSS}])
    sections = [decision_section(board, settings, pd.DataFrame(), version_warning=XSS),
                leaderboard_section(board, board, settings),
                failed_section(failed, list(failed.columns)),
                Section(id="extra", title=XSS, sentences=[f"`{XSS}` and **{XSS}**"],
                        warnings=[XSS], table=Table([{"model": XSS, "value": 1.5}]))]
    page = render_page(XSS, sections)
    assert "<img src=x" not in page and "onerror=alert(1)>" not in page
    escaped = "&lt;img src=x onerror=alert(1)&gt;"
    # the title, id (top set, leaderboard, failed), flag badge, consensus, width and version
    # warnings, error, and the extra section's title, sentences, warning and table cell
    assert page.count(escaped) >= 12
    assert f"<code>{escaped}</code> and <b>{escaped}</b>" in page  # the only inline markup
    assert str(inline("a < b")) == "a &lt; b"


def test_a_wide_top_set_gets_pages_and_a_forest_plot_of_bounded_height():
    """300 of 2,000 models in the top set: the decision screen pages its table (20 rows) and the
    forest plot draws the first 30 of them, not a figure 300 rows tall."""
    import io

    from PIL import Image

    from zoorank.report.decision_screen import MAX_FOREST_MODELS, TOP_SET_PAGE_SIZE, decision_section
    from zoorank.report.page import render_page

    rank = np.arange(1, N_MODELS + 1, dtype=float)
    board = pd.DataFrame({"rank": rank, "rank_low": np.maximum(1, rank - 300),
                          "rank_high": rank + 300, "p_best": 1 / N_MODELS,
                          "in_top_set": rank <= 300, "model_id": _ids(), "flags": "",
                          "digits/rankme": -rank})
    settings = {"ordered_by": "rankme", "primary_metric": {"digits": "rankme"},
                "decision": {"confidence": 0.95, "top_set": _ids()[:300]}}
    section = decision_section(board, settings, pd.DataFrame())
    page = render_page("wide", [section])
    table = page.index("<table id='top-set'>")
    assert page.rindex(f"<div class='paged' data-page-size='{TOP_SET_PAGE_SIZE}'>", 0, table) > 0
    assert page[table:].count("<tr>") == 300 + 1  # every top-set model, paged in the browser
    assert 'document.querySelectorAll("div.paged")' in page  # the table script is on the page
    height = Image.open(io.BytesIO(section.images[0].data)).size[1]
    assert height < 0.26 * 90 * (MAX_FOREST_MODELS + 12), height  # ≈ 30 rows, not 300
