"""The documentation: the README's size and links, no tracker numbers in user-facing text, and the
generated reference pages (docs/_hooks/zoorank_docs.py) naming every config field and every command
line option the code has. The site itself is built by `mkdocs build --strict` in .ci/run (`make
docs`), which fails on a broken link, include or reference."""

from __future__ import annotations

import argparse
import importlib.util
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
#: "issue 12", "contract 8", "issues 23, 26": the project's tracker, meaningless to a user
TRACKER = re.compile(r"\b(issues?|contracts?)\s+\d+", re.I)


def _user_facing_pages() -> list[Path]:
    pages = [README, REPO / "benchmarks" / "README.md"]
    pages += [p for p in sorted((REPO / "docs").rglob("*.md"))
              if not {"_moved", "_hooks"} & set(p.relative_to(REPO / "docs").parts)]
    pages += sorted((REPO / "benchmarks" / "results").glob("*.md"))  # published as the site's pages
    return pages


@pytest.fixture(scope="module")
def hooks():
    spec = importlib.util.spec_from_file_location("zoorank_docs", REPO / "docs/_hooks/zoorank_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_is_at_most_150_lines():
    assert len(README.read_text().splitlines()) <= 150


def test_readme_starts_with_the_make_commands_before_any_config():
    text = README.read_text()
    assert text.index("make demo") < text.index("make test") < text.index("```yaml")


def test_readme_links_point_at_files_of_the_repository():
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README.read_text())
    local = [link for link in links if "://" not in link]
    assert local, "the README links into the docs"
    missing = [link for link in local if not (REPO / link).exists()]
    assert not missing, missing


@pytest.mark.parametrize("page", _user_facing_pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_no_tracker_numbers_in_user_facing_text(page):
    hits = [m.group(0) for m in TRACKER.finditer(page.read_text())]
    assert not hits, f"{page.relative_to(REPO)}: {hits}"


def test_config_reference_names_every_field_with_its_description(hooks):
    from zoorank.config import RunConfig

    schema = RunConfig.model_json_schema()
    page = hooks.config_reference()
    models = {"RunConfig": schema, **schema.get("$defs", {})}
    for name, model in models.items():
        section = page.split(f"## {name}", 1)[1].split("\n## ", 1)[0]
        for field, prop in model.get("properties", {}).items():
            row = next((line for line in section.splitlines() if line.startswith(f"| `{field}` |")),
                       None)
            assert row is not None, f"{name}.{field} is not in the config reference"
            described = hooks._cell(prop.get("description", ""))[:40]
            assert described in row, (name, field, row)


def test_cli_reference_names_every_command_and_option(hooks):
    from zoorank.cli import build_parser

    page = hooks.cli_reference()

    def walk(parser: argparse.ArgumentParser, prefix: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    assert f"## `{prefix} {name}`" in page
                    walk(sub, f"{prefix} {name}")
            elif action.option_strings and not isinstance(action, argparse._HelpAction):
                assert f"`{action.option_strings[0]}" in page, (prefix, action.option_strings)

    walk(build_parser(), "zoorank")


def test_every_results_file_is_a_page_of_its_scripts_group(hooks):
    results = sorted((REPO / "benchmarks" / "results").glob("*.md"))
    grouped = {p for paths in hooks._results().values() for p in paths}
    assert grouped == set(results)
    for group, paths in hooks._results().items():
        for path in paths:
            script = next(REPO.glob(f"benchmarks/*/{path.stem}.py"), None)
            if script is not None:
                assert script.parent.name == group, (path.name, script)


def _yaml_blocks() -> list[tuple[str, str]]:
    blocks = []
    for page in _user_facing_pages():
        for i, block in enumerate(re.findall(r"```yaml\n(.*?)```", page.read_text(), re.S)):
            blocks.append((f"{page.relative_to(REPO)}#{i}", block))
    return blocks


#: what a fragment of a run config is completed with to validate: one dataset per name its models
#: list (digits when none) and one timm model; a tune fragment's base is the tune example.
_BASE_MODEL = {"source": "timm", "name": "resnet18"}


def _completed_run_config(doc: dict) -> dict:
    names = {n for m in doc.get("models", []) if isinstance(m, dict) for n in m.get("datasets", [])}
    names |= {n for m in doc.get("models", []) if isinstance(m, dict)
              for n in (m.get("label_map") or {})}
    datasets = [{"name": n, "source": "image_folder", "path": f"./{n}"} for n in sorted(names)]
    return {"datasets": datasets or [{"name": "digits", "source": "sklearn_digits"}],
            "models": [_BASE_MODEL], **doc}


@pytest.mark.parametrize("where,block", _yaml_blocks(), ids=[w for w, _ in _yaml_blocks()])
def test_every_config_shown_in_the_docs_validates(where, block):
    """A YAML block with `datasets` and `models` is a run config, one with `dataset` and
    `backbone` a tune config: each validates as written. A fragment (e.g. one `rank:` key, or a
    `models:` list) validates within a minimal config of its kind, so a misspelt key fails."""
    import yaml

    from zoorank.config import RunConfig
    from zoorank.config.loading import parse_config
    from zoorank.tune.config import TuneConfig, parse_tune_config

    doc = yaml.safe_load(block)
    assert isinstance(doc, dict), f"{where}: a YAML block of the docs is a mapping"
    if {"dataset", "backbone"} <= doc.keys() or not doc.keys() <= set(RunConfig.model_fields):
        assert doc.keys() <= set(TuneConfig.model_fields), (where, sorted(doc))
        base = yaml.safe_load((REPO / "examples" / "tune_search.yaml").read_text())
        parse_tune_config({**base, **doc})
    else:
        parse_config(_completed_run_config(doc))


def _docstring_nodes(tree) -> set[int]:
    import ast

    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and node.body and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)}


def test_no_tracker_numbers_in_the_products_messages_templates_or_rendered_docstrings():
    """What zoorank prints or renders (every string literal of the package that is not a
    docstring: console lines, errors, help, report sentences; the report's templates), and the
    docstrings the site renders (the objects of the Python API page, every registered metric's
    function) name no tracker number. Internal docstrings and comments may."""
    import ast
    import importlib
    import inspect

    import zoorank.metrics  # noqa: F401  (registers every metric)
    from zoorank.metrics.registry import REGISTRY

    hits = []
    for path in sorted((REPO / "zoorank").rglob("*.py")):
        tree = ast.parse(path.read_text())
        docstrings = _docstring_nodes(tree)
        hits += [f"{path.relative_to(REPO)}:{node.lineno}: {node.value[:60]!r}"
                 for node in ast.walk(tree)
                 if isinstance(node, ast.Constant) and isinstance(node.value, str)
                 and id(node) not in docstrings and TRACKER.search(node.value)]
    hits += [str(p.relative_to(REPO)) for p in sorted((REPO / "zoorank").rglob("*"))
             if p.suffix in (".j2", ".html", ".js", ".css") and TRACKER.search(p.read_text())]
    rendered = re.findall(r"^::: ([\w.]+)", (REPO / "docs/reference/api.md").read_text(), re.M)
    assert "zoorank.api.run" in rendered
    for name in rendered:
        module, _, attr = name.rpartition(".")
        obj = getattr(importlib.import_module(module), attr)
        members = [v for k, v in vars(obj).items() if not k.startswith("_")] \
            if inspect.isclass(obj) else []
        hits += [f"{name}: {getattr(o, '__name__', o)}" for o in [obj, *members]
                 if TRACKER.search(inspect.getdoc(o) or "")]
    hits += [f"metric {name}" for name, m in REGISTRY.items()
             if TRACKER.search((m.function.__doc__ if m.function else "") or "")
             or TRACKER.search(m.description or "")]
    assert not hits, hits
