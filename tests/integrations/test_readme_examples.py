"""The label-free Tune tutorial's examples (docs/tutorials/label-free-tune.md) run as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "docs" / "tutorials" / "label-free-tune.md"


def _example(marker: str) -> str:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    return next(b for b in blocks if marker in b and "search(" in b)


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("marker", ["report(backbone", "ProbeCallback(report.probe)"])
def test_readme_tune_example_runs_and_exports_a_zoo(ray_session, tmp_path, monkeypatch, marker):
    from zoorank.zoo import read_zoo_file

    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__main__"}  # functions defined there travel to Tune by value
    exec(compile(_example(marker), "README.md", "exec"), namespace)
    outcome = namespace["outcome"]
    assert all(r.error is None for r in outcome.grid)
    specs = read_zoo_file(outcome.zoo_file)
    assert len(specs) == 2 and all(Path(s.checkpoint).is_file() for s in specs)
