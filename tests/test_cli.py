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
