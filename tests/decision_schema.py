"""The keys of decision.json as its schema (``zoorank.decide.decision_schema``) and its generated
reference page (``docs/reference/decision-json.md``, built by the docs hook) document them, and the
keys a written document holds, recursively, for the tests that compare them."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "reference" / "decision-json.md"
HOOK = ROOT / "docs" / "_hooks" / "zoorank_docs.py"
#: the keys whose values are objects with documented keys of their own.
NESTED = ("pick", "shortlist", "expected_regret_pp", "next_step", "top_set", "counts")


def generated_page() -> str:
    """The reference page as the site shows it: its marker replaced by the docs hook's
    generator (the same function ``mkdocs build`` calls)."""
    spec = importlib.util.spec_from_file_location("zoorank_docs_hook", HOOK)
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    text = DOC.read_text()
    assert "<!-- zoorank:decision-json -->" in text, "the page lost its generated part"
    return text.replace("<!-- zoorank:decision-json -->", hook.GENERATORS["decision-json"]())


def page_paths() -> set[str]:
    """Every key path the page's tables document (``pick.model_id``, ``failed[].error`` ...)."""
    return {m.group(1) for m in re.finditer(r"^\|\s*`([^`]+)`\s*\|", generated_page(), re.M)}


def documented_keys() -> dict[str, set[str]]:
    """'' → the documented top-level keys, 'pick' → the keys of ``pick``, ... (from the page)."""
    keys: dict[str, set[str]] = {"": set()}
    for path in page_paths():
        parent, _, key = path.rpartition(".")
        keys.setdefault(parent, set()).add(key)
    return keys


def schema_paths() -> set[str]:
    from zoorank.decide.decision_schema import SECTIONS

    return {f"{where}.{k}" if where else k for where, model in SECTIONS.items()
            for k in model.model_fields}


def written_paths(doc: dict[str, Any]) -> set[str]:
    """Every key path of a written document, recursively into the schema's objects: an entry of
    a mapping (``pick.values.digits``) is named as the schema names it (``pick.values.<dataset>``),
    an item of a list as ``failed[]``. A few-label entry's extra keys are left out (the page says
    ``zoorank label`` adds more)."""
    from zoorank.decide.decision_schema import SECTIONS

    entries = {w.rsplit(".", 1)[0]: w for w in SECTIONS if w.endswith(">")}
    out: set[str] = set()

    def walk(value: Any, where: str) -> None:
        if where in SECTIONS and isinstance(value, dict):  # an object of the schema
            declared = SECTIONS[where].model_fields
            for k, v in value.items():
                if where.startswith("few_label.") and k not in declared:
                    continue
                path = f"{where}.{k}" if where else k
                out.add(path)
                walk(v, path)
        elif where in entries and isinstance(value, dict):
            for v in value.values():
                walk(v, entries[where])
        elif f"{where}[]" in SECTIONS and isinstance(value, list):
            for v in value:
                walk(v, f"{where}[]")

    walk(doc, "")
    return out
