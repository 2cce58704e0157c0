"""The ``zoorank`` command's exit statuses on real runs."""

from __future__ import annotations

import pytest
import yaml
from deltalake import DeltaTable

from zoorank.cli import main


@pytest.mark.timeout(300)
def test_a_run_where_every_model_fails_exits_3_and_still_reports_why(tmp_path, ray_session,
                                                                       capsys):
    config = {
        "store": str(tmp_path / "store"), "seed": 0,
        "datasets": [{"name": "digits", "source": "sklearn_digits", "limit": 40}],
        "models": [{"id": f"net-{i}", "source": "python", "name": "no_such_module:make_net"}
                   for i in range(2)],
        "metrics": ["rankme"],
    }
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    assert main(["run", str(path)]) == 3
    assert "nothing could be ranked" in capsys.readouterr().err
    failed = DeltaTable(str(tmp_path / "store" / "failed")).to_pandas()
    assert set(failed["model_id"]) == {"net-0", "net-1"}
    assert failed["error"].str.contains("no_such_module").all()
    assert "no_such_module" in (tmp_path / "store" / "report" / "index.html").read_text()
    (tmp_path / "store" / "report" / "index.html").unlink()
    assert main(["report", str(path)]) == 3  # the report alone: written, and exit 3 as well
    assert "nothing could be ranked" in capsys.readouterr().err
    assert "no_such_module" in (tmp_path / "store" / "report" / "index.html").read_text()


ENTRY = """
import atexit, sys
from zoorank import cli

def fake_main(argv=None):
    # an exit handler registered while the command runs (as Ray's is, at its import): it must
    # still run, before the process ends
    atexit.register(lambda: print("later handler ran", flush=True))
    print("output of the command")
    return int(sys.argv[1]) if sys.argv[1].isdigit() else cli.build_parser().parse_args([sys.argv[1]])

cli.main = fake_main
cli.entry()
"""


@pytest.mark.parametrize(("arg", "status"), [("0", 0), ("3", 3), ("143", 143),
                                             ("--version", 0), ("--no-such-flag", 2)])
def test_the_command_ends_with_its_status_after_every_exit_handler(arg, status):
    """`zoorank` ends through :func:`zoorank.cli.entry`: the status main returns (or argparse's),
    its output flushed, handlers registered later run, and no native teardown that could abort
    after the work is done (delta-rs#2184)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", ENTRY, arg], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == status, done.stderr[-2000:]
    if arg.isdigit():
        assert done.stdout.splitlines() == ["output of the command", "later handler ran"]


def test_python_dash_m_zoorank_and_the_console_script_go_through_entry():
    import subprocess
    import sys
    from importlib.metadata import entry_points
    from pathlib import Path

    (script,) = entry_points(group="console_scripts", name="zoorank")
    assert script.value == "zoorank.cli:entry"
    done = subprocess.run([sys.executable, "-m", "zoorank", "--version"], capture_output=True,
                          text=True, timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0 and done.stdout.startswith("zoorank ")
