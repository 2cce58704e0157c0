"""The command line: help on every option, ``--debug`` / ``--quiet`` anywhere, ``--json`` on
stdout alone, no flag that does nothing, the environment documented, bars that follow the
terminal."""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from zoorank.cli import ENVIRONMENT, build_parser, main

REPO = Path(__file__).resolve().parents[2]
ZOO = {"datasets": [{"name": "digits", "source": "sklearn_digits", "limit": 20}],
       "models": [{"source": "timm", "name": "resnet18", "input_size": 32}]}


def _parsers(parser: argparse.ArgumentParser, path: str = "zoorank"):
    """Every (command path, parser) of the command line, the subcommands' included."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, f"{path} {name}")


#: one valid command line per command, without the global flags.
ARGV = {
    "zoorank run": ["run", "c.yaml"], "zoorank embed": ["embed", "c.yaml"],
    "zoorank score": ["score", "c.yaml"], "zoorank rank": ["rank", "c.yaml"],
    "zoorank report": ["report", "c.yaml"], "zoorank gc": ["gc", "c.yaml"],
    "zoorank tune": ["tune", "t.yaml"], "zoorank demo": ["demo"],
    "zoorank ask": ["ask", "c.yaml", "--budget", "4"],
    "zoorank label": ["label", "c.yaml", "l.csv"], "zoorank zoo": ["zoo", "c.yaml"],
    "zoorank inspect": ["inspect", "x.pt"], "zoorank metrics": ["metrics", "z.npy"],
    "zoorank config schema": ["config", "schema"],
    "zoorank config validate": ["config", "validate", "c.yaml"],
    "zoorank init": ["init", "runs"],
    "zoorank calibrate": ["calibrate", "store-a", "--out", "r.json"],
    "zoorank plan": ["plan", "c.yaml"], "zoorank export": ["export", "store", "pick", "out"],
}


def test_every_option_and_argument_has_help():
    missing = []
    for path, parser in _parsers(build_parser()):
        for action in parser._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            if not action.help or action.help == argparse.SUPPRESS:
                missing.append(f"{path} {action.option_strings or action.dest}")
    assert missing == []


def test_every_command_is_in_the_table_of_command_lines():
    leaves = {p for p, parser in _parsers(build_parser())
              if not any(isinstance(a, argparse._SubParsersAction) for a in parser._actions)}
    assert leaves == set(ARGV)


@pytest.mark.parametrize("command", sorted(ARGV))
@pytest.mark.parametrize("flag", ["--debug", "--quiet"])
def test_debug_and_quiet_go_anywhere_on_the_line(command, flag):
    parser = build_parser()
    argv = ARGV[command]
    dest = flag.lstrip("-")
    assert getattr(parser.parse_args(argv), dest, False) is False
    depth = 2 if command.startswith("zoorank config") else 1
    for line in ([flag, *argv], [*argv, flag], [*argv[:depth], flag, *argv[depth:]]):
        assert getattr(parser.parse_args(line), dest) is True, line


@pytest.mark.parametrize("argv", [
    ["ask", "c.yaml", "--budget", "4", "--address", "auto"],
    ["zoo", "c.yaml", "--address", "auto"],
    ["report", "c.yaml", "--address", "auto"],
    ["gc", "c.yaml", "--address", "auto"],
])
def test_address_is_refused_where_nothing_starts_ray(argv, capsys):
    with pytest.raises(SystemExit) as err:
        build_parser().parse_args(argv)
    assert err.value.code == 2 and "unrecognized arguments: --address" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "message"), [
    (["run", "c.yaml", "--interval", "5"], "--interval: only with --watch"),
    (["run", "c.yaml", "--until", "2h", "--settle", "1"], "--until, --settle: only with --watch"),
    (["demo", "--data", "/x"], "--data: the digits are built in"),
])
def test_options_that_would_do_nothing_are_usage_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as err:
        main(argv)
    err_text = capsys.readouterr().err
    assert err.value.code == 2 and message in err_text
    assert err_text.startswith(f"usage: zoorank {argv[0]} ")


def test_the_epilog_lists_every_environment_variable():
    text = build_parser().format_help()
    assert "environment variables:" in text
    assert all(name in text for name, _ in ENVIRONMENT)


def _environment_read_by_zoorank() -> set[str]:
    """Names of the environment variables zoorank's code reads (or sets a default for)."""
    names: set[str] = set()
    pattern = re.compile(r"""(?:environ(?:\.get|\.setdefault)?\(|environ\[|getenv\(|_seconds\()\s*"""
                         r"""["']([A-Z][A-Z0-9_]+)["']""")
    constant = re.compile(r"""^\s*(?:_?ENV_[A-Z_]*|ENV_[A-Z_]+)\s*=\s*["']([A-Z][A-Z0-9_]+)["']""",
                          re.M)
    for file in (REPO / "zoorank").rglob("*.py"):
        text = file.read_text()
        names |= set(pattern.findall(text)) | set(constant.findall(text))
    runtime = (REPO / "zoorank" / "runtime.py").read_text()
    block = runtime.split("_RAY_ENV = {", 1)[1].split("}", 1)[0]
    names |= set(re.findall(r'"([A-Z][A-Z0-9_]+)"', block))
    return names


def test_every_environment_variable_zoorank_reads_is_documented():
    page = (REPO / "docs" / "reference" / "environment.md").read_text()
    read = _environment_read_by_zoorank()
    assert {"RAY_ADDRESS", "ZOORANK_PROGRESS", "ZOORANK_S3_MAX_ATTEMPTS", "ZOORANK_DEBUG",
            "ZOORANK_POOL_MODELS"} <= read  # the scan finds what it must
    assert sorted(n for n in read if f"`{n}`" not in page) == []
    documented = {n.strip() for name, _ in ENVIRONMENT for n in name.split(",")}
    assert sorted(n for n in documented if f"`{n}`" not in page) == []
    assert "`NO_COLOR`" in page


# -- output: --json on stdout alone, --quiet ----------------------------------------------------


def _cli(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "zoorank", *argv], capture_output=True,
                          text=True, timeout=300, cwd=cwd)


@pytest.fixture(scope="module")
def zoo_config(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("zoo") / "c.yaml"
    path.write_text(yaml.safe_dump(ZOO))
    return path


@pytest.mark.timeout(300)
def test_zoo_json_is_the_resolved_models_alone_on_stdout(zoo_config):
    import timm

    done = _cli("zoo", str(zoo_config), "--json")
    assert done.returncode == 0, done.stderr
    (model,) = json.loads(done.stdout)["models"]
    reference = timm.create_model("resnet18", pretrained=False, num_classes=0)
    assert model["model_id"] == "resnet18" and model["input_size"] == 32
    assert model["parameters"] == sum(p.numel() for p in reference.parameters())
    assert model["checkpoint"] is None and model["pretrained"] is False


@pytest.mark.timeout(300)
def test_quiet_prints_nothing_but_errors_and_the_json(zoo_config, tmp_path):
    quiet = _cli("--quiet", "zoo", str(zoo_config))
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, "", "")
    both = _cli("zoo", str(zoo_config), "-q", "--json")
    assert both.returncode == 0 and both.stderr == ""
    assert json.loads(both.stdout)["models"][0]["model_id"] == "resnet18"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**ZOO, "sede": 1}))
    failed = _cli("zoo", str(bad), "--quiet")
    assert failed.returncode == 2 and failed.stdout == ""
    assert "sede: unknown key; did you mean 'seed'?" in failed.stderr


def test_metrics_json_is_parseable_and_quiet_keeps_it(tmp_path, capsys):
    from zoorank.metrics import rankme

    Z = np.random.default_rng(0).normal(size=(200, 16))
    np.save(tmp_path / "z.npy", Z)
    assert main(["metrics", str(tmp_path / "z.npy"), "--json", "--quiet"]) == 0
    out = capsys.readouterr()
    assert out.err == ""
    assert json.loads(out.out)["metrics"]["rankme"]["value"] == pytest.approx(rankme(Z))


@pytest.fixture(scope="module")
def label_template(tmp_path_factory):
    from labels_fixtures import write_label_store

    root = tmp_path_factory.mktemp("labels-json")
    cfg, truth = write_label_store(str(root), n=120)
    return root, cfg, truth


@pytest.mark.timeout(300)
def test_ask_and_label_print_their_results_as_json(label_template, tmp_path, capsys):
    from labels_fixtures import copy_label_store

    src, cfg, truth = label_template
    path, cfg = copy_label_store(src, cfg, tmp_path)
    assert main(["ask", str(path), "--budget", "12", "--json"]) == 0
    out = capsys.readouterr()
    asked = json.loads(out.out)
    assert "to_label.csv" in out.err  # the notes went to stderr
    to_label = Path(asked["paths"]["to_label.csv"])
    with open(to_label) as f:
        ids = [int(r["sample_id"]) for r in csv.DictReader(f)]
    assert asked["round"] == 1 and asked["dataset"] == "digits" and asked["sample_ids"] == ids
    assert len(ids) == 12
    filled = tmp_path / "filled.csv"
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(["sample_id", "label", "source"])
    writer.writerows([(s, int(truth[s]), "") for s in ids])
    filled.write_text(buf.getvalue())
    assert main(["label", str(path), str(filled), "--no-rank", "--json", "-q"]) == 0
    out = capsys.readouterr()
    merged = json.loads(out.out)
    assert out.err == "" and merged["dataset"] == "digits" and merged["added"] == 12


# -- progress bars follow the terminal -----------------------------------------------------------


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(("setting", "term", "tty", "shown"), [
    (None, "xterm", True, True), (None, "xterm", False, False), (None, "dumb", True, False),
    ("0", "xterm", True, False), ("1", "xterm", False, True), ("auto", "xterm", True, True),
])
def test_progress_bars_follow_the_terminal(monkeypatch, setting, term, tty, shown):
    from zoorank.console import progress_enabled
    from zoorank.console.embed_progress import Display

    if setting is None:
        monkeypatch.delenv("ZOORANK_PROGRESS", raising=False)
    else:
        monkeypatch.setenv("ZOORANK_PROGRESS", setting)
    monkeypatch.setenv("TERM", term)
    monkeypatch.setattr(sys, "stdout", _Tty() if tty else io.StringIO())
    monkeypatch.setattr(sys, "stderr", _Tty() if tty else io.StringIO())
    assert progress_enabled() is shown
    display = Display(3, enabled=True)
    assert display.progress.disable is (not shown)
    display.entries_done(2)
    assert display.state() == {"entries": (2, 3)}  # counted either way
