"""The Python API (zoorank.api): run a config and open a finished run.

A hand-written store (``rank_fixtures``, no Ray) checks what ``open`` reads; one real tiny run
(three CNNs on digits, on a local Ray) checks ``run`` end to end and that ``open`` reads it back.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml

import zoorank
from zoorank.errors import ConfigError, InputError

REPO = Path(__file__).resolve().parents[1]


# -- the package's surface -------------------------------------------------------------------------
def test_import_zoorank_imports_none_of_the_heavy_libraries():
    code = ("import sys, zoorank; print(zoorank.__version__); "
            "print([m for m in ('pandas', 'ray', 'torch', 'pydantic', 'zoorank.api') "
            "if m in sys.modules]); print(zoorank.api.validate.__name__, zoorank.run.__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines()[-2:] == ["[]", "validate run"]


def test_run_is_the_api_function_after_the_stages_are_imported():
    from zoorank.tasks.runner import run_tasks  # noqa: F401  (the task runner, imported by every stage)

    assert zoorank.run is zoorank.api.run and callable(zoorank.run)
    assert {"run", "open", "Result"} <= set(dir(zoorank))
    with pytest.raises(AttributeError):
        zoorank.no_such_name  # noqa: B018


# -- configs and overrides (no Ray) ----------------------------------------------------------------
def _config_file(tmp_path: Path, **extra) -> Path:
    data = {"store": str(tmp_path / "store"), "seed": 0,
            "datasets": [{"name": "digits", "source": "sklearn_digits", "limit": 90}],
            "models": [{"id": f"cnn-w{w}", "source": "python", "name": "zoorank.tune.models:small_cnn",
                        "model_kwargs": {"width": w}, "input_size": 8} for w in (8, 16)]
            + [{"id": "cnn-w16-d2", "source": "python", "name": "zoorank.tune.models:small_cnn",
                "model_kwargs": {"width": 16, "depth": 2}, "input_size": 8}],
            "views": [{"name": "clean"}, {"name": "simclr", "samples": 30, "per_sample": 4}],
            "metrics": ["rankme", "lidar"],
            "oracle": {"knn": True},
            "rank": {"bootstrap": 10, "resamples": 200}, **extra}
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_overrides_merge_into_a_section_and_replace_other_values(tmp_path):
    path = _config_file(tmp_path)
    config = zoorank.api.validate(path, store=str(tmp_path / "other"), seed=3,
                                  rank={"confidence": 0.9}, metrics=["rankme"])
    assert config.store == str(tmp_path / "other") and config.seed == 3
    # the section's other keys are the file's, not the defaults
    assert (config.rank.confidence, config.rank.bootstrap, config.rank.resamples) == (0.9, 10, 200)
    assert config.metrics == ["rankme"]
    assert [m.id for m in config.models] == ["cnn-w8", "cnn-w16", "cnn-w16-d2"]
    # a mapping and a RunConfig take overrides the same way as a file
    from_dict = zoorank.api.validate(yaml.safe_load(path.read_text()), rank={"confidence": 0.9})
    from_config = zoorank.api.validate(zoorank.api.validate(path), rank={"confidence": 0.9})
    assert from_dict == from_config == config.model_copy(
        update={"store": from_dict.store, "seed": 0, "metrics": ["rankme", "lidar"]})


@pytest.mark.parametrize("overrides, field", [
    ({"rank": {"confidenc": 0.9}}, "rank.confidenc: unknown key"),
    ({"seed": "zero"}, "seed:"),
    ({"stor": "x"}, "stor: unknown key"),
    ({"rank": {"primary_metric": "no_such_metric"}}, "rank.primary_metric"),
])
def test_an_invalid_override_is_a_config_error_naming_the_file_and_field(tmp_path, overrides, field):
    path = _config_file(tmp_path)
    with pytest.raises(ConfigError, match=re.escape(f"{path}: {field}")):
        zoorank.run(path, **overrides)  # fails before Ray starts: nothing is written
    assert not (tmp_path / "store").exists()


def test_the_errors_are_exported_at_the_top_level():
    from zoorank import errors

    assert (zoorank.ConfigError, zoorank.InputError, zoorank.NothingRankedError,
            zoorank.ZoorankError) == (errors.ConfigError, errors.InputError,
                                      errors.NothingRankedError, errors.ZoorankError)
    assert issubclass(zoorank.ConfigError, zoorank.ZoorankError)


def test_open_of_a_config_that_never_ran_raises_and_creates_no_store(tmp_path):
    path = _config_file(tmp_path)
    with pytest.raises(InputError, match=f"{re.escape(str(path))}: its store .* does not exist"):
        zoorank.open(path)
    with pytest.raises(InputError, match="does not exist"):
        zoorank.open(yaml.safe_load(path.read_text()))
    assert not (tmp_path / "store").exists()


def test_open_of_a_missing_path_raises_and_creates_nothing(tmp_path):
    missing = tmp_path / "nothing-here"
    with pytest.raises(InputError, match="no such store"):
        zoorank.open(missing)
    assert not missing.exists()
    with pytest.raises(ConfigError, match="config file not found"):
        zoorank.open(tmp_path / "missing.yaml")
    with pytest.raises(InputError, match="no finished run"):
        zoorank.open(tmp_path)  # a directory, but no leaderboard


# -- open: a hand-written store (no Ray) -----------------------------------------------------------
@pytest.fixture
def ranked_store(store_root):
    """The rank fixtures' store after RANK, without decision.json (a store ranked before it was
    written); returns (root, config)."""
    from rank_fixtures import config_dict

    from zoorank.config.loading import parse_config
    from zoorank.rank import write_rank_outputs
    from zoorank.store import Store
    from zoorank.zoo import resolve_models

    config = parse_config(config_dict(str(store_root)))
    store = Store(config.store)
    write_rank_outputs(config, store, resolve_models(config), store.read_metrics(),
                       store.read_frame("oracle"), show=False)
    (store_root / "decision.json").unlink(missing_ok=True)
    return store_root, config


def test_open_picks_the_model_with_the_highest_rankme_and_lists_the_failed_one(ranked_store):
    from rank_fixtures import embeddings

    from zoorank.decide.shortlist import shortlist_for
    from zoorank.metrics import rankme

    root, config = ranked_store
    result = zoorank.open(root)
    # RankMe computed here, on the fixture's own embeddings: the board is ordered by it
    _, _, models = embeddings(300)
    values = {m: rankme(Z) for m, Z in models.items()}
    assert result.pick.model_id == max(values, key=values.get) == "noise"
    assert set(result.leaderboard["model_id"]) == set(values)  # "broken" has no row
    assert [m.model_id for m in result.shortlist] == shortlist_for(
        result.leaderboard, result.settings)["models"]
    ranks = result.leaderboard.set_index("model_id")["rank"]
    listed = [m.model_id for m in result.shortlist]
    assert result.shortlist[0] == result.pick and list(ranks[listed]) == sorted(ranks[listed])
    # each shortlisted model carries its rank and the label-free values it was ranked with
    assert [m.rank for m in result.shortlist] == list(ranks[listed])
    assert result.pick.metrics["digits/rankme"] == pytest.approx(values["noise"], rel=1e-6)
    assert any("broken" in w and "failed" in w for w in result.warnings)
    assert result.decision == {} and result.report_path is None
    assert result.store == str(root.resolve())
    # the long table holds the leaderboard's label-free values, and the config opens the same run
    long = result.metrics().set_index(["model_id", "metric"])["value"]
    assert long[("proj-b", "rankme")] == pytest.approx(values["proj-b"], rel=1e-6)
    assert set(result.metrics()["metric"]) == {"rankme", "uniformity", "nc"}
    assert str(zoorank.open(config).pick) == str(zoorank.open(config.model_dump()).pick) == "noise"
    # every configured model counted: all but "broken" ranked, and it failed
    n = len(config.models)
    assert f"({n - 1} of {n} configured models ranked, 1 failed)" in repr(result).splitlines()[0]


def test_open_reads_the_pick_and_shortlist_from_decision_json_when_there_is_one(ranked_store):
    from zoorank.decide.verdict import KEYS, write_decision
    from zoorank.store import Store

    root, _ = ranked_store
    doc = {**dict.fromkeys(KEYS),
           "pick": {"model_id": "proj-b", "metric": "rankme", "value": 14.38, "dataset": "digits"},
           "shortlist": {"models": ["proj-b", "rot-0"]}, "caveats": ["a caveat"],
           "disagreement": "2 of 2 label-free metrics put the pick first.",
           "next_step": {"command": "zoorank ask CONFIG --budget 40"}, "schema_version": 1}
    write_decision(Store(str(root)), doc)
    result = zoorank.open(str(root))
    assert (str(result.pick), [str(m) for m in result.shortlist]) == ("proj-b", ["proj-b", "rot-0"])
    assert result.decision == json.loads((root / "decision.json").read_text())
    # the caveats stand for the checks of the settings (here the width confound), failures follow
    assert result.warnings[0] == "a caveat" and len(result.warnings) == 2
    assert "broken" in result.warnings[1]
    shown = repr(result).splitlines()
    assert "  pick:      proj-b (rankme = 14.38 on digits)" in shown
    assert "  agreement: 2 of 2 label-free metrics put the pick first." in shown
    assert "  next step: zoorank ask CONFIG --budget 40" in shown
    assert "zoorank ask CONFIG --budget 40" in result._repr_html_()


@pytest.mark.parametrize("flags, pick", [
    (["", "", ""], "a"),
    (["duplicates", "", ""], "b"),                          # passed over for the first unflagged
    (["collapsed", "failed:lidar", "duplicates"], "b"),     # all flagged: the first not blocking
    (["collapsed", "non_finite", "collapsed"], "a"),         # all blocking: the first ranked
])
def test_a_store_without_decision_json_picks_as_the_decision_does(flags, pick):
    board = pd.DataFrame({"model_id": ["a", "b", "c", "d"], "rank": [1.0, 2.0, 3.0, np.nan],
                          "flags": [*flags, ""]})
    assert zoorank.api._verdict(board, {}, {})[0] == pick


def test_table_reads_every_delta_table_of_the_store(ranked_store):
    from deltalake import DeltaTable

    root, _ = ranked_store
    result = zoorank.open(root)
    for name in ("metrics", "manifest", "failed", "leaderboard", "datasets/digits/samples"):
        expected = DeltaTable(str(root / name)).to_pandas()
        assert len(result.table(name)) == len(expected) > 0
    assert result.table("no_such_table").empty


# -- run: one real tiny run ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """``zoorank.run`` on three small CNNs over 90 digits (clean + a 30 × 4 augmented view), the
    first with its weights in a checkpoint file, and a fourth whose checkpoint is not a readable
    file (a failed model), with an override; returns (config path, result)."""
    import torch

    from zoorank.tune.models import small_cnn

    tmp = tmp_path_factory.mktemp("api-run")
    path = _config_file(tmp)
    data = yaml.safe_load(path.read_text())
    torch.manual_seed(7)
    torch.save({"state_dict": {f"backbone.{k}": v for k, v in small_cnn(width=8).state_dict().items()}},
               tmp / "cnn-w8.ckpt")
    data["models"][0].update(checkpoint=str(tmp / "cnn-w8.ckpt"), state_dict_prefix="backbone.")
    (tmp / "broken.ckpt").write_bytes(b"not a checkpoint" * 64)
    data["models"].append({**data["models"][1], "id": "broken",
                           "checkpoint": str(tmp / "broken.ckpt")})
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path, zoorank.run(str(path), rank={"confidence": 0.9})


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_run_returns_the_pick_of_the_ordering_metric_and_writes_the_report(tiny_run):
    from deltalake import DeltaTable

    from zoorank.metrics import registry

    path, result = tiny_run
    board = result.leaderboard
    assert list(board["model_id"].sort_values()) == ["cnn-w16", "cnn-w16-d2", "cnn-w8"]
    assert result.pick.model_id in set(board["model_id"])
    assert result.report_path is not None and Path(result.report_path).is_file()
    assert result.settings["decision"]["confidence"] == 0.9  # the override reached RANK
    # the expected pick, from the stored metric rows the leaderboard names (read with deltalake):
    # the best value of the ordering metric among the models without a health flag
    metric = result.settings["primary_metric"]["digits"]
    used = result.settings["primary_fingerprints"]["digits"]
    rows = DeltaTable(str(Path(result.store) / "metrics")).to_pandas()
    rows = rows[(rows["metric"] == metric) & (rows["dataset"] == "digits")]
    rows = rows[[used.get(m) == fp for m, fp in zip(rows["model_id"], rows["fingerprint"])]]
    unflagged = set(board.loc[board["flags"].fillna("") == "", "model_id"])
    rows = rows[rows["model_id"].isin(unflagged)]
    sign = registry.info(metric).direction
    assert result.pick.model_id == rows.loc[(sign * rows["value"]).idxmax(), "model_id"]
    long = result.metrics()
    got = long[long["metric"] == metric].set_index("model_id")["value"]
    assert np.allclose(got[rows["model_id"]], rows["value"])
    # every (dataset, view, model) embedded: 3 models × 2 views
    manifest = result.table("manifest")
    assert (manifest["status"] == "done").sum() == 6
    if result.decision:  # RANK writes decision.json: its pick is the result's
        assert result.decision["pick"]["model_id"] == result.pick.model_id
    # the next step names the config file as it was given to run; digits has a label for
    # every image, so there is nothing to ask for
    step = result.decision["next_step"]
    assert step["config"] == str(path) and step["unlabelled"] == 0 and step["command"] is None
    assert "  next step: none (every image of digits already has a label)" in repr(result)
    assert str(result.pick) in repr(result) and str(result.pick) in result._repr_html_()
    # four configured, the one with an unreadable checkpoint failed
    assert "(3 of 4 configured models ranked, 1 failed)" in repr(result).splitlines()[0]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_open_reads_back_what_run_returned(tiny_run):
    path, result = tiny_run
    for target in (result.store, path, str(path)):
        again = zoorank.open(target)
        assert (again.pick, again.shortlist, again.warnings) == (
            result.pick, result.shortlist, result.warnings)
        assert again.pick.checkpoint == result.pick.checkpoint
        pd.testing.assert_frame_equal(again.leaderboard, result.leaderboard)
    assert os.path.samefile(zoorank.open(path).report_path, result.report_path)


def _digit_input(sample_id: int, info: dict) -> Any:
    """Digit ``sample_id`` as the model's input, made here from scikit-learn's array and the
    exported preprocessing (0..16 → 0..255, grey → RGB, centre crop, (x - mean) / std)."""
    import torch
    from PIL import Image
    from sklearn.datasets import load_digits

    from zoorank.data.views import clean_view
    from zoorank.zoo import Geometry

    pre = info["preprocessing"]
    grey = np.rint(load_digits().images[sample_id] * (255.0 / 16.0)).astype(np.uint8)
    img = Image.fromarray(grey).convert("RGB")
    pixels = clean_view(img, Geometry(pre["input_size"], pre["interpolation"], pre["crop_pct"]))
    x = torch.from_numpy(pixels).permute(2, 0, 1).float().div(255.0)[None]
    return (x - torch.tensor(pre["mean"]).view(1, 3, 1, 1)) / torch.tensor(pre["std"]).view(1, 3, 1, 1)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_every_ranked_model_loads_and_exports_the_network_that_embed_ran(tiny_run, tmp_path):
    """For each ranked model: ``load()`` on a digit gives the embedding EMBED stored for it; the
    exported safetensors loads strictly into the bare architecture and gives the same output."""
    import torch
    from safetensors.torch import load_file

    from zoorank.store import Store
    from zoorank.tune.models import small_cnn

    path, _ = tiny_run
    result = zoorank.open(path)
    store = Store(result.store)
    assert result.pick is not None and result.shortlist[0] == result.pick
    for model_id in result.leaderboard["model_id"]:
        model = result.model(model_id)
        stored = store.read_embeddings("digits", "clean", model_id)
        rows = stored.embedding[stored.view_index == 0]
        ids = stored.sample_id[stored.view_index == 0]
        paths = result.export(tmp_path / model_id, model_id=model_id)
        info = json.loads(Path(paths["info"]).read_text())
        bare = small_cnn(**info["architecture"]["model_kwargs"])
        bare.load_state_dict(load_file(paths["weights"]), strict=True)
        bare.eval()
        net = model.load()
        for k in (0, len(ids) - 1):
            x = _digit_input(int(ids[k]), info)
            with torch.no_grad():
                got, again = net(x)[0].numpy(), bare(x)[0].numpy()
            np.testing.assert_allclose(got, rows[k], rtol=1e-4, atol=1e-5)
            np.testing.assert_allclose(again, rows[k], rtol=1e-4, atol=1e-5)
        assert info["decision"]["picked"] == (model_id == result.pick.model_id)
    # the checkpointed model: the prefix stripped, its digest the file's sha256
    first = json.loads((tmp_path / "cnn-w8" / "zoorank-model.json").read_text())
    import hashlib

    digest = hashlib.sha256((Path(path).parent / "cnn-w8.ckpt").read_bytes()).hexdigest()
    assert first["provenance"]["checkpoint_digest"] == digest
    assert result.model("cnn-w8").checkpoint == str(Path(path).parent / "cnn-w8.ckpt")
    assert not any(k.startswith("backbone.") for k in load_file(tmp_path / "cnn-w8" / "model.safetensors"))
    # the CLI, given the store alone (the config comes from decision.json's next step), writes
    # the same weights for the pick
    from zoorank.cli import main

    assert main(["export", result.store, "pick", str(tmp_path / "cli")]) == 0
    pick = result.pick.model_id
    by_cli, by_api = (load_file(tmp_path / d / "model.safetensors") for d in ("cli", pick))
    assert by_cli.keys() == by_api.keys()
    assert all(torch.equal(by_cli[k], by_api[k]) for k in by_api)
    assert main(["export", result.store, "no-such-model", str(tmp_path / "none")]) == 2
