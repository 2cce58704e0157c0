"""REPORT stage on a small store whose tables are written directly (no Ray, no embed/score)."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

import numpy as np
import pandas as pd
import pytest

from zoorank.config.loading import parse_config
from zoorank.errors import InputError
from zoorank.store import Store
from zoorank.store.schema import METRICS_COLUMNS

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


class _Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.images: list[str] = []
        self.external: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "img":
            self.images.append(attrs["src"])
        if tag == "link" or (tag == "script" and attrs.get("src")) or any(
            str(v).startswith(("http:", "https:", "//", "/")) for k, v in attrs.items()
            if k in ("src", "href")
        ):
            self.external.append(f"{tag} {attrs}")

    def handle_data(self, data):
        self.text.append(data)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    from rank_fixtures import config_dict, oracle_rows, write_store

    from zoorank.rank import write_rank_outputs
    from zoorank.report import run_report
    from zoorank.zoo import resolve_models

    root = tmp_path_factory.mktemp("report-store")
    models = write_store(str(root))
    config = parse_config(config_dict(str(root), oracle={"knn": True}))
    store = Store(config.store)
    oracle = oracle_rows(models)
    store.write_parquet("oracle", oracle)
    write_rank_outputs(config, store, resolve_models(config), store.read_metrics(), oracle)
    index = run_report(config)
    return root, config, index


def test_report_is_an_html_page_in_the_store(report):
    root, _, index = report
    assert index == str(root / "report" / "index.html")
    assert (root / "report" / "index.html").read_text().startswith("<!DOCTYPE html>")


def test_report_names_every_model_including_the_failed_one(report):
    root, config, _ = report
    page = _Page()
    page.feed((root / "report" / "index.html").read_text())
    text = " ".join(page.text)
    for model in config.models:
        assert re.search(rf"\b{re.escape(model.id)}\b", text), model.id
    assert "corrupt checkpoint" in text  # the failed model's reason


def test_every_image_of_the_report_exists_beside_it_as_a_png(report):
    root, _, _ = report
    page = _Page()
    page.feed((root / "report" / "index.html").read_text())
    # self-contained: relative links only, inline scripts and CSS only
    assert page.external == []
    assert len(page.images) >= 3
    for src in page.images:
        path = root / "report" / src
        assert path.is_file(), src
        assert path.read_bytes()[:8] == PNG_SIGNATURE
    names = " ".join(page.images)
    for kind in ("agreement-digits", "reliability-digits-rot"):
        assert kind in names
    assert "ranks.png" not in names  # one dataset: a per-dataset rank chart is flat lines


def test_scatter_is_an_interactive_plot_with_plotly_inlined_once(report):
    from plotly.offline import get_plotlyjs

    root, config, _ = report
    html_text = (root / "report" / "index.html").read_text()
    assert html_text.count(get_plotlyjs()) == 1  # inline, once: works offline
    assert "<section id='scatter-digits-knn_accuracy'>" in html_text
    assert re.search(r'Plotly\.newPlot\(\s*"plot-scatter-digits-knn_accuracy"', html_text)
    # each point's hover text is its model id: every ranked model appears in the figure's JSON
    figure = html_text[html_text.index('"plot-scatter-digits-knn_accuracy",'):]
    figure = figure[:figure.index("</script>")]
    for model in ("proj-a", "proj-b", "rot-0", "lowrank"):
        assert f'"{model}"' in figure


def test_a_second_report_rewrites_nothing(report):
    from zoorank.report import run_report

    root, config, _ = report
    files = sorted((root / "report").iterdir())
    before = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in files}
    run_report(config)
    after = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in sorted(
        (root / "report").iterdir())}
    assert after == before


def test_report_without_a_leaderboard_says_to_run_rank_first(tmp_path):
    from rank_fixtures import config_dict

    from zoorank.report import run_report

    config = parse_config(config_dict(str(tmp_path / "empty")))
    with pytest.raises(InputError, match="zoorank rank"):
        run_report(config)


def test_many_ensembles_get_one_nc_box_plot_and_histograms_of_the_extremes(report, tmp_path):
    import shutil

    from rank_fixtures import config_dict, stamp_fingerprints

    from zoorank.rank import run_rank
    from zoorank.report import run_report
    from zoorank.report.plots import MAX_RELIABILITY_HISTOGRAMS

    root, _, _ = report
    copy = tmp_path / "store"
    shutil.copytree(root, copy)
    store = Store(str(copy))
    rng = np.random.default_rng(0)
    raw = config_dict(str(copy))  # no oracle: the extra members have no shards to read
    manifest, rows = [], []
    for i in range(11):  # 11 more seed ensembles whose NC medians are spread over (0, 1)
        nc = np.clip(rng.normal(0.05 + 0.08 * i, 0.02, 60), 0.0, 1.0)
        store.write_parquet(f"reliability/digits/extra-{i:02d}.parquet",
                            pd.DataFrame({"sample_id": np.arange(60), "nc": nc}))
        for member in ("a", "b"):  # members: done clean embeddings and their NC rows
            model_id = f"extra-{i:02d}-{member}"
            raw["models"].append({"id": model_id, "source": "python", "name": "fixtures:unused",
                                  "group": f"extra-{i:02d}"})
            manifest.append({"dataset": "digits", "view": "clean", "model_id": model_id,
                             "fingerprint": "-", "status": "done", "error": None, "rows": 60,
                             "dim": 4, "seconds": 0.1, "bad_images": 0})
            rows.append({"model_id": model_id, "dataset": "digits", "metric": "nc",
                         "value": float(np.mean(nc)), "params": "{}", "n": 60, "dim": 4,
                         "seed": 0, "zoorank_version": "test", "fingerprint": "-"})
    store.write_parquet("reliability/digits/orphan.parquet",  # of no ensemble: never drawn
                        pd.DataFrame({"sample_id": np.arange(60), "nc": np.full(60, 0.99)}))
    store.update_manifest(manifest)
    store.write_parquet("metrics", pd.concat([store.read_metrics(), pd.DataFrame(rows)]))
    config = parse_config(raw)
    stamp_fingerprints(config, store)
    run_rank(config, show=False)
    run_report(config)
    (copy / "reliability" / "digits" / "orphan.parquet").unlink()

    medians = {f.stem: float(pd.read_parquet(f)["nc"].median())
               for f in (copy / "reliability" / "digits").glob("*.parquet")}
    order = sorted(medians, key=lambda g: (-medians[g], g))
    half = MAX_RELIABILITY_HISTOGRAMS // 2
    expected = {f"reliability-digits-{g}.png" for g in order[:half] + order[-half:]}
    page = _Page()
    page.feed((copy / "report" / "index.html").read_text())
    drawn = {src for src in page.images if src.startswith("reliability-")}
    assert drawn == expected
    assert "nc-digits.png" in page.images
    assert (copy / "report" / "nc-digits.png").read_bytes()[:8] == PNG_SIGNATURE
    assert f"all {len(medians)} tables" in " ".join(page.text)


def test_label_budget_curve_is_in_agreement_parquet_and_the_report(report, tmp_path):
    """Few-label cells in oracle.parquet → budget rows in agreement.parquet → plot + verdict."""
    import shutil

    from rank_fixtures import config_dict
    from scipy import stats

    from zoorank.rank import write_rank_outputs
    from zoorank.report import run_report
    from zoorank.zoo import resolve_models

    root, _, _ = report
    copy = tmp_path / "store"
    shutil.copytree(root, copy)
    config = parse_config(config_dict(str(copy), oracle={
        "knn": True, "transferability": ["logme"], "labels_per_class": [5, 10],
        "label_budget_seeds": 2}))
    store = Store(config.store)
    oracle = store.read_frame("oracle")
    acc = oracle.set_index("model_id")["value"]
    cells = []
    for m, a in acc.items():
        # 5 labels/class: the reverse of the oracle's order; 10: the oracle's order exactly
        for k, seed, value in ((5, 0, -a), (5, 1, -a), (10, 0, a), (10, 1, a)):
            cells.append({**oracle[oracle["model_id"] == m].iloc[0].to_dict(),
                          "metric": f"logme:k{k}s{seed}", "value": value})
    oracle = pd.concat([oracle, pd.DataFrame(cells)], ignore_index=True)
    store.write_parquet("oracle", oracle)
    write_rank_outputs(config, store, resolve_models(config), store.read_metrics(), oracle,
                       show=False)
    agree = store.read_frame("agreement")
    curve = agree[agree["labels_per_class"].notna() & (agree["budget_seed"] == "mean")]
    taus = dict(zip(curve["labels_per_class"], curve["kendall_tau"]))
    assert taus[10.0] == pytest.approx(1.0)
    assert taus[5.0] == pytest.approx(stats.kendalltau(-acc.to_numpy(), acc.to_numpy()).statistic)
    label_free = agree[agree["labels_per_class"].isna() & (agree["family"] == "all")
                       & (agree["metric"] != "leaderboard_rank")]
    best = label_free.loc[label_free["kendall_tau"].idxmax()]
    assert best["kendall_tau"] < 1.0

    run_report(config)
    page = _Page()
    page.feed((copy / "report" / "index.html").read_text())
    assert "budget-digits-knn_accuracy.png" in page.images
    assert (copy / "report" / "budget-digits-knn_accuracy.png").read_bytes()[:8] == PNG_SIGNATURE
    text = " ".join(page.text)
    assert (f"digits vs knn_accuracy: logme overtakes {best['metric']} "
            f"(τ={best['kendall_tau']:+.2f}) at 10 labels/class (τ=+1.00)") in text
    # the label-free agreement table is unchanged: no few-label score among its rows
    assert "logme@" not in text


# -- the first screen: the decision (rank intervals, top set, flags, consensus) ------------------


@pytest.fixture(scope="module")
def decided_report(tmp_path_factory):
    from decision_fixtures import write_fold_and_health_rows
    from rank_fixtures import config_dict, oracle_rows, stamp_fingerprints, write_store

    from zoorank.decide.leaderboard import read_leaderboard_settings
    from zoorank.rank import write_rank_outputs
    from zoorank.report import run_report
    from zoorank.zoo import resolve_models

    root = tmp_path_factory.mktemp("decided-report-store")
    models = write_store(str(root))
    raw = config_dict(str(root), oracle={"knn": True})
    weights = tmp_path_factory.mktemp("weights")
    for m in raw["models"]:  # checkpoint files (their digest only: nothing loads them here)
        (weights / f"{m['id']}.safetensors").write_bytes(m["id"].encode())
        m["checkpoint"] = str(weights / f"{m['id']}.safetensors")
    config = parse_config(raw)
    store = Store(config.store)
    stamp_fingerprints(config, store)
    write_fold_and_health_rows(store, config)
    oracle = oracle_rows(models)
    store.write_parquet("oracle", oracle)
    write_rank_outputs(config, store, resolve_models(config), store.read_metrics(), oracle,
                       show=False)
    index = run_report(config)
    return root, config, index, read_leaderboard_settings(store)


def test_report_starts_with_the_decision_card_before_the_full_leaderboard(decided_report):
    root, _, index, settings = decided_report
    page = (root / "report" / "index.html").read_text()
    assert page.index("id='decision'") < page.index("<h2>Leaderboard</h2>")
    assert page.index("<h2>Leaderboard</h2>") < page.index("id='settings'")
    assert "{&quot;" not in page and '{"aggregation"' not in page  # no raw JSON settings
    assert (root / "report" / "forest.png").read_bytes().startswith(PNG_SIGNATURE)
    assert settings["decision"]["top_set_rule"] == "mcs"


def _decision(root) -> dict:
    return json.loads((root / "decision.json").read_text())


def test_every_caveat_of_decision_json_is_in_the_collapsed_details_under_the_card(decided_report):
    from markupsafe import escape  # jinja2's own escaping

    from zoorank.report.page import inline

    root, config, _, settings = decided_report
    page = (root / "report" / "index.html").read_text()
    caveats = _decision(root)["caveats"]
    details = page[page.index("<details id='caveats'>"):]
    details = details[:details.index("</details>")]
    items = re.findall(r"<li class='caveat'>(.*?)</li>", details)
    assert items == [str(inline(c)) for c in caveats] and len(caveats) >= 4
    # the top set's guarantee is one of them, once
    guarantee = settings["decision"]["top_set_guarantee"]
    assert guarantee.startswith(
        f"The top set is a Model Confidence Set of nominal level {config.rank.confidence:.0%}")
    assert sum(str(escape(guarantee)) in item for item in items) == 1
    # the card's own text comes before every caveat; the details are closed (no ``open``)
    assert page.index("id='next-step'") < page.index("<details id='caveats'>")
    assert "<details id='caveats' open" not in page


def test_the_level_printed_is_the_measured_one_at_the_measured_settings_else_called_nominal():
    from zoorank.report.decision_screen import top_set_claim
    from zoorank.stats.uncertainty import MEASURED_COVERAGE

    worst = min(c for c, _, _ in MEASURED_COVERAGE.values())
    at_defaults = {"confidence": 0.95, "folds": 8, "fold_fraction": 0.5, "top_set_guarantee": "G."}
    claim = top_set_claim(at_defaults)
    assert claim["level"] == f"{worst:.0%}"
    assert f"read it as a {worst:.0%} set" in claim["sentence"] and claim["sentence"].startswith("G.")
    # beside it, the label-free p(best)'s measured calibration, its worst setting named
    from zoorank.stats.uncertainty import MEASURED_P_BEST_ECE

    hardest = max(MEASURED_P_BEST_ECE, key=MEASURED_P_BEST_ECE.get)
    assert f"by {MEASURED_P_BEST_ECE[hardest]:.2f} on average ({hardest})" in claim["sentence"]
    assert "not a calibrated probability where models tie" in claim["sentence"]
    for other in ({"confidence": 0.9}, {"folds": 4}, {"fold_fraction": 1.0}):
        claim = top_set_claim({**at_defaults, **other})
        assert claim["level"].startswith("nominal ") and "not measured" in claim["sentence"]


def test_first_heading_names_the_pick_and_the_metric_record_is_a_caveat(decided_report):
    from markupsafe import escape

    from zoorank.report.metric_record_page import load_record

    root, _, _, settings = decided_report
    page = (root / "report" / "index.html").read_text()
    # the first heading of the page names the pick: the first unflagged row of leaderboard.csv
    csv = pd.read_csv(root / "leaderboard.csv").sort_values("rank", kind="stable")
    pick = csv[csv["rank"].notna() & (csv["flags"].fillna("") == "")]["model_id"].iloc[0]
    first = re.search(r"<h([1-6])[^>]*>(.*?)</h\1>", page)
    assert first.group(1) == "1" and first.group(2) == f"Pick: {pick}"
    assert _decision(root)["pick"]["model_id"] == pick
    assert f"<title>zoorank report: pick {pick}</title>" in page
    # the shortlist, the regret, the disagreement and the next step, before the details
    for marker in ("id='shortlist'", "id='regret'", "id='disagreement'", "id='next-step'"):
        assert page.index(marker) < page.index("<details id='caveats'>")
    # the shortlist's measured record (zoorank/decide/shortlist_record.json), or that it has none
    short = _decision(root)["shortlist"]
    rule_html = page[page.index("id='shortlist-rule'"):page.index("id='regret'")]
    assert (f"{short['hits']} of {short['zoos']}" in rule_html if short["hits"] is not None
            else "not measured yet" in rule_html)
    if short.get("mean_size") is not None:  # the mean size to one decimal, as a size reads
        assert f"with {short['mean_size']:.1f} models on average" in rule_html
    # the metric's record, computed here from the package's file: mean τ and zoo counts
    metric = settings["ordered_by"]
    record = load_record()
    zoos = record["metrics"][metric]["zoos"]
    taus = [z["tau"] for z in zoos.values()]
    details = page[page.index("<details id='caveats'>"):]
    assert f"Kendall τ {sum(taus) / len(taus):+.2f} on average" in details
    assert f"on the {len(zoos)} of {len(record['zoos'])} validation zoos" in details
    assert str(escape("none under a distribution shift")) in details


def test_the_few_label_pick_of_decision_json_is_on_the_card_and_in_the_console(
        decided_report, tmp_path, capsys):
    import shutil

    from zoorank.decide.verdict import update_few_label
    from zoorank.report import run_report

    root, config, _, _ = decided_report
    copy = tmp_path / "store"
    shutil.copytree(root, copy)
    config = config.model_copy(update={"store": str(copy)})
    few = {"model_id": "proj-b", "p_best": 0.87, "labels": 60, "posterior": "heads' correctness"}
    update_few_label(Store(str(copy)), "digits", few)
    capsys.readouterr()
    run_report(config)
    page = (copy / "report" / "index.html").read_text()
    card = page[:page.index("<details id='caveats'>")]
    line = re.search(r"<p class='few-label'>(.*?)</p>", card).group(1)
    assert line == ("<b>Few-label pick (digits, 60 labels):</b> proj-b, p(best | labels) 0.87 "
                    "(heads&#39; correctness).")
    # the next step counts the 60 labels given back against the measured 200
    assert "zoorank ask CONFIG --budget 140" in card
    # the verdict's first line, on the card and the console, is the few-label pick
    assert "<h1 id='pick'>Pick: proj-b (few-label: p(best | labels) 0.87 after 60 labels)</h1>" \
        in card and "the label-free pick: <b>" in card
    out = capsys.readouterr().out
    assert out.splitlines()[[line.startswith("Pick: ") for line in out.splitlines()].index(True)] \
        .startswith("Pick: proj-b (few-label: p(best | labels) 0.87 after 60 labels")


def _served(root):
    """The report's folder over HTTP on 127.0.0.1 (a page from a server is a secure context:
    the Clipboard API works there as it does for a user opening a file); yields its base URL."""
    import functools
    import http.server
    import threading

    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.mark.timeout(180)
def test_first_screen_in_a_real_browser_names_the_pick_and_copies_its_checkpoint(
        decided_report, chromium):
    root, config, _, settings = decided_report
    decision = _decision(root)
    server = _served(root)
    try:
        context = chromium.new_context(viewport={"width": 1280, "height": 800},
                                       permissions=["clipboard-read", "clipboard-write"])
        page = context.new_page()
        page.goto(f"http://127.0.0.1:{server.server_address[1]}/report/index.html")
        fold = 800

        def on_first_screen(selector: str) -> bool:
            box = page.locator(selector).first.bounding_box()
            return box is not None and box["y"] < fold and page.locator(
                selector).first.is_visible()

        # the first heading names the pick of decision.json, on the first screen
        heading = page.locator("h1, h2, h3").first
        assert heading.inner_text() == f"Pick: {decision['pick']['model_id']}"
        assert on_first_screen("#pick") and on_first_screen("#checkpoint")
        for selector in ("#shortlist", "#regret", "#disagreement", "#next-step"):
            assert on_first_screen(selector), selector
        assert page.locator("#disagreement").inner_text() == decision["disagreement"]
        listed = page.locator("#shortlist-table tbody tr td:nth-child(2)").all_inner_texts()
        assert listed == decision["shortlist"]["models"]
        assert page.locator("#next-step-command").inner_text() == \
            decision["next_step"]["command"]
        # the copy button puts the checkpoint's path on the clipboard
        path = decision["pick"]["checkpoint"]
        assert path == next(m.checkpoint for m in config.models
                            if m.id == decision["pick"]["model_id"])
        assert page.locator("#checkpoint-path").inner_text() == path
        page.evaluate("navigator.clipboard.writeText('before')")
        page.locator("#copy-checkpoint").click()
        page.wait_for_function("t => navigator.clipboard.readText().then(c => c === t)", arg=path,
                               timeout=5_000)
        assert page.evaluate("navigator.clipboard.readText()") == path
        # every caveat is collapsed under the card: hidden until opened
        assert not page.locator("#caveat-list").is_visible()
        assert not page.locator("#top-set").is_visible()
        page.locator("#caveats summary").click()
        assert page.locator("#caveat-list li").count() == len(decision["caveats"])
        badge = page.locator("#flags .badge.blocking", has_text="collapsed")
        assert badge.count() >= 1 and badge.first.is_visible()
        page.locator("#top-set-details summary").click()
        rows = page.locator("#top-set tbody tr")
        assert rows.count() == len(settings["decision"]["top_set"]) >= 1
        listed = [rows.nth(i).locator("td").nth(1).inner_text() for i in range(rows.count())]
        assert listed == settings["decision"]["top_set"] == decision["top_set"]["models"]
        assert re.fullmatch(r"\d+(–\d+)?", rows.nth(0).locator("td").nth(2).inner_text())
        assert "collapsed" not in listed
        forest = page.locator("#forest img")
        forest.scroll_into_view_if_needed()
        page.wait_for_function("() => document.querySelector('#forest img').complete")
        assert forest.evaluate("img => img.naturalWidth > 0")
        context.close()
    finally:
        server.shutdown()


def _report_with_versions(report, tmp_path, torch_versions):
    """A copy of the report's store whose done entries record ``torch_versions`` (cycled) and one
    timm / Pillow version each, reported again; returns the page's decision-screen paragraphs."""
    import itertools
    import shutil

    from zoorank.report import run_report

    root, config, _ = report
    copy = tmp_path / "store"
    shutil.copytree(root, copy)
    config = config.model_copy(update={"store": str(copy)})
    store = Store(str(copy))
    manifest = store.read_manifest()
    done = manifest["status"] == "done"
    cycle = itertools.cycle(torch_versions)
    manifest["versions"] = manifest["versions"].astype(object)
    manifest.loc[done, "versions"] = [
        json.dumps({"torch": next(cycle), "timm": "1.0.9", "Pillow": "11.0.0",
                    "transformers": "4.50.0"}, sort_keys=True) for _ in range(int(done.sum()))]
    store.write_parquet("manifest", manifest)
    run_report(config)
    page = (copy / "report" / "index.html").read_text()
    return re.findall(r"<p id='version-warning'[^>]*>(.*?)</p>", page), page


def test_a_store_embedded_with_two_torch_versions_is_warned_about_on_the_decision_screen(
        report, tmp_path):
    secret_build = "2.12.1+https://builder:hunter2secret@wheels.example.com/torch"
    found, page = _report_with_versions(report, tmp_path, ["2.13.0", secret_build])
    assert len(found) == 1
    warning = found[0]
    # the library that differs, with both versions seen (sorted), redacted; the uniform ones unnamed
    assert "torch 2.12.1+https://" in warning and " / 2.13.0" in warning
    assert "hunter2secret" not in page
    assert "timm" not in warning and "Pillow" not in warning and "transformers" not in warning
    # on the decision screen, next to the other warnings
    decision = page[page.index("<section id='decision'"):page.index("</section>")]
    assert "id='version-warning'" in decision


def test_a_store_embedded_with_one_set_of_versions_has_no_version_warning(report, tmp_path):
    found, page = _report_with_versions(report, tmp_path, ["2.13.0"])
    assert found == [] and "version-warning" not in page


def test_two_datasets_get_the_per_dataset_rank_chart(tmp_path):
    from rank_fixtures import config_dict, write_store

    from zoorank.rank import write_rank_outputs
    from zoorank.report import run_report
    from zoorank.zoo import resolve_models

    datasets = ("digits", "digits2")
    write_store(str(tmp_path), n=150, datasets=datasets)
    config = parse_config(config_dict(str(tmp_path), datasets=datasets))
    store = Store(config.store)
    write_rank_outputs(config, store, resolve_models(config), store.read_metrics(),
                       pd.DataFrame(columns=METRICS_COLUMNS), show=False)
    run_report(config)
    page = _Page()
    page.feed((tmp_path / "report" / "index.html").read_text())
    assert "ranks.png" in page.images
    assert (tmp_path / "report" / "ranks.png").read_bytes()[:8] == PNG_SIGNATURE
