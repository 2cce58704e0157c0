"""The run config's JSON schema describes every field (``zoorank config schema``, the docs'
reference, ``yaml-language-server``); unknown keys and names get a did-you-mean at every level."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from zoorank.cli import main
from zoorank.config import RunConfig
from zoorank.config.loading import keys_at, load_config, parse_config
from zoorank.errors import ConfigError

BASE = {"datasets": [{"name": "digits", "source": "sklearn_digits"}],
        "models": [{"id": "m", "source": "timm", "name": "resnet18"}]}


def _properties(schema: dict) -> list[tuple[str, str, dict]]:
    """(section, field, property) of the root and of every ``$defs`` entry."""
    out = [("RunConfig", k, v) for k, v in schema["properties"].items()]
    for section, body in schema.get("$defs", {}).items():
        out += [(section, k, v) for k, v in body.get("properties", {}).items()]
    return out


def test_every_field_of_the_schema_has_a_one_line_description():
    schema = RunConfig.model_json_schema()
    props = _properties(schema)
    # the sections and fields, counted independently of the schema: the pydantic models' own
    sections = {"RunConfig", "DatasetSpec", "ModelSpec", "FromTuneSpec", "ViewSpec",
                "EmbedOptions", "ScoreOptions", "OracleSpec", "RankOptions"}
    import zoorank.config as c

    expected = sum(len(getattr(c, s).model_fields) for s in sections)
    assert len(props) == expected
    missing = [f"{s}.{k}" for s, k, v in props if not v.get("description", "").strip()]
    assert missing == []
    assert all("\n" not in v["description"] and "  " not in v["description"] for _, _, v in props)
    assert not [f"{s}.{k}" for s, k, v in props if "issue" in v["description"].lower()]
    for section in sections - {"RunConfig"}:  # each section says what it is
        assert schema["$defs"][section].get("description"), section


def test_descriptions_name_what_the_code_accepts():
    """The lists a description spells out are the code's own: the registry's metrics, the
    checkpoint presets, the view recipes."""
    from zoorank.data.views import VIEW_RECIPES
    from zoorank.metrics import registry
    from zoorank.zoo.checkpoints import PREFIX_PRESETS

    defs = RunConfig.model_json_schema()["$defs"]
    metrics = RunConfig.model_json_schema()["properties"]["metrics"]["description"]
    assert all(f"{m}," in metrics or f"{m})" in metrics for m in registry.config_names())
    prefix = defs["ModelSpec"]["properties"]["state_dict_prefix"]["description"]
    assert all(f"`{p}`" in prefix for p in PREFIX_PRESETS)
    recipe = defs["ViewSpec"]["properties"]["recipe"]["description"]
    assert all(f"`{r}`" in recipe for r in VIEW_RECIPES)
    for section, field in (("DatasetSpec", "path"), ("ModelSpec", "checkpoint"),
                           ("FromTuneSpec", "from_tune")):
        assert "folder of the config file" in defs[section]["properties"][field]["description"]


def test_zoorank_config_schema_prints_the_schema_and_writes_it_with_output(tmp_path, capsys):
    assert main(["config", "schema"]) == 0
    assert json.loads(capsys.readouterr().out) == RunConfig.model_json_schema()
    out = tmp_path / "schema.json"
    assert main(["config", "schema", "--output", str(out)]) == 0
    assert capsys.readouterr().out == ""
    assert json.loads(out.read_text()) == RunConfig.model_json_schema()


def test_zoorank_config_validate_exits_0_or_2_naming_the_field(tmp_path, capsys):
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(BASE))
    assert main(["config", "validate", str(good), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["store"] == str(tmp_path / "zoorank-store")  # the default, beside the file
    assert shown["models"][0]["name"] == "resnet18" and shown["seed"] == 0
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**BASE, "seed": "x"}))
    assert main(["config", "validate", str(bad)]) == 2
    assert "bad.yaml: seed: Input should be a valid integer" in capsys.readouterr().err


@pytest.mark.parametrize(("patch", "expected"), [
    ({"datasets": [{"name": "d", "source": "sklearn_digits", "limt": 3}]},
     "datasets[0](d).limt: unknown key; did you mean 'limit'?"),
    ({"models": [{"id": "m", "source": "timm", "name": "resnet18", "checkpiont": "a.pt"}]},
     "models[0](m).checkpiont: unknown key; did you mean 'checkpoint'?"),
    ({"models": [{"from_tune": "t", "extra": 1}]},
     "models[0].extra: unknown key (the keys here: from_tune)"),
    ({"views": [{"name": "clean", "per_sampel": 1}]},
     "views[0](clean).per_sampel: unknown key; did you mean 'per_sample'?"),
    ({"oracle": {"knnn": True}}, "oracle.knnn: unknown key; did you mean 'knn'?"),
    ({"rank": {"primary_metrc": "rankme"}},
     "rank.primary_metrc: unknown key; did you mean 'primary_metric'?"),
    ({"embed": {"batchsize": 8}}, "embed.batchsize: unknown key; did you mean 'batch_size'?"),
    ({"score": {"nc_kk": 8}}, "score.nc_kk: unknown key; did you mean 'nc_k'?"),
    ({"metric": ["rankme"]}, "metric: unknown key; did you mean 'metrics'?"),
    ({"colour": "red"}, "colour: unknown key (the keys here: store, seed, datasets, models"),
    ({"metrics": ["rankmee"]}, "metrics: unknown metric(s) ['rankmee'] (did you mean 'rankme'?)"),
    ({"oracle": {"knn": True, "transferability": ["logm"]}},
     "oracle: transferability: unknown score(s) ['logm'] (did you mean 'logme'?)"),
])
def test_an_unknown_key_or_name_gets_a_did_you_mean_with_its_full_path(patch, expected):
    with pytest.raises(ConfigError) as err:
        parse_config({**BASE, **patch}, "run.yaml")
    assert f"run.yaml: {expected}" in str(err.value)


def test_the_keys_of_a_location_are_those_of_its_section():
    from zoorank.config import DatasetSpec, ModelSpec, OracleSpec

    assert keys_at(RunConfig, ("datasets", 3)) == list(DatasetSpec.model_fields)
    assert keys_at(RunConfig, ("models", 0, "model")) == list(ModelSpec.model_fields)
    assert keys_at(RunConfig, ("models", 0, "from_tune")) == ["from_tune"]
    assert keys_at(RunConfig, ("oracle",)) == list(OracleSpec.model_fields)
    assert keys_at(RunConfig, ("metrics", 0)) is None
    assert keys_at(RunConfig, ("nope",)) is None


def test_the_tune_config_gets_the_did_you_mean_of_its_own_sections(tmp_path):
    from zoorank.tune.config import parse_tune_config

    with pytest.raises(ConfigError, match=r"probe\.sampels: unknown key; did you mean 'samples'"):
        parse_tune_config({"dataset": {"name": "d", "source": "sklearn_digits"},
                           "probe": {"sampels": 10}}, "tune.yaml")


def test_a_config_error_on_the_command_line_exits_2_with_the_did_you_mean(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({**BASE, "sed": 1}))
    done = subprocess.run([sys.executable, "-m", "zoorank", "zoo", str(path), "--debug"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "run.yaml: sed: unknown key; did you mean 'seed'?" in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""


def test_the_contract_example_still_loads(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text((Path(__file__).parent / "test_loading.py").read_text()
                    .split('EXAMPLE = """', 1)[1].split('"""', 1)[0])
    assert load_config(path).models[0].id == "r18-lr0.3-s0"
