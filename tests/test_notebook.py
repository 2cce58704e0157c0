"""notebooks/explore_run.ipynb runs top to bottom against a small finished store (nbclient): it
opens the store with ``zoorank.open`` and shows its verdict, tables and one plot."""

from __future__ import annotations

from pathlib import Path

import pytest

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "explore_run.ipynb"


@pytest.mark.timeout(240)
def test_explore_notebook_shows_the_verdict_the_tables_and_a_plot(tmp_path, monkeypatch):
    import nbformat
    import pandas as pd
    from deltalake import DeltaTable
    from nbclient import NotebookClient
    from rank_fixtures import config_dict, write_store

    from zoorank.config.loading import parse_config
    from zoorank.rank import write_rank_outputs
    from zoorank.store import Store
    from zoorank.zoo import resolve_models

    root = tmp_path / "store"
    datasets = ("digits", "digits-b")
    write_store(str(root), n=200, datasets=datasets)
    config = parse_config(config_dict(str(root), datasets=datasets, primary_metric="uniformity",
                                      dataset_weights={"digits-b": 2.0}))
    store = Store(config.store)
    board = write_rank_outputs(config, store, resolve_models(config), store.read_metrics(),
                               store.read_frame("oracle"), show=False)
    monkeypatch.setenv("ZOORANK_STORE", str(root))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, timeout=180, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    # the pick is the leaderboard's first model, as leaderboard.csv (a plain file) lists it
    csv = pd.read_csv(root / "leaderboard.csv")
    assert f"pick: {csv.loc[csv['rank'].notna(), 'model_id'].iloc[0]}" in text
    # the summary counts the (dataset, metric) pairs of the label-free columns, over every model
    pairs = [c for c in csv.columns if c.count("/") == 1 and c.split("/")[0] in datasets
             and c.split("/")[1] in ("rankme", "uniformity", "nc")]
    assert f"{len(pairs)} (dataset, metric) pairs over {len(csv)} models" in text
    assert "broken" in set(DeltaTable(str(root / "failed")).to_pandas()["model_id"])
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) == 1
    # the leaderboard's top model and the failed model appear in the rendered tables
    html = "".join(o.get("data", {}).get("text/html", "") for o in outputs)
    assert board.iloc[0]["model_id"] in html and "broken" in html
