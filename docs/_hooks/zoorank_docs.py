"""mkdocs hooks (``hooks:`` in ``mkdocs.yml``): the pages generated from the code at build time.

* **Reference pages.** A page holds a marker ``<!-- zoorank:NAME -->`` where the generated part
  goes; :func:`on_page_markdown` replaces it with :data:`GENERATORS` ``[NAME]()``: the run config
  from its pydantic schema (``RunConfig.model_json_schema()``), the command line from the parser
  (``zoorank.cli.build_parser()``), the metric registry, the store's tables (``zoorank.store``'s
  layout and table schemas). An unknown marker is a warning, so ``mkdocs build --strict`` fails.
* **Benchmark results.** Every ``benchmarks/results/<name>.md`` becomes the page
  ``benchmarks/<group>/<name>.md`` (:func:`on_files`), the group being the folder of the script that
  writes it (``benchmarks/performance|science|zoos/``); each group gets an index page (commit, date
  and command of every results file, read from its header), and the navigation lists them under
  "Benchmarks" (:func:`on_config`).

* **Pages written on other branches.** :data:`PENDING` names pages that other work adds. Until a
  page exists, its navigation entry is dropped and a link to it is rendered as its text (both
  logged), so the site builds before and after it lands, and links to it from the start.

Nothing is written into ``docs/``: the generated pages exist only in the build.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

log = logging.getLogger("mkdocs.plugins.zoorank")
ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
RESULTS = BENCHMARKS / "results"
#: script groups, in the order the site lists them, with the sentence their index page opens with
GROUPS = {
    "performance": "Time and memory of zoorank's stages and functions, each against a baseline "
                   "measured in the same run.",
    "science": "Validations of what zoorank claims: rankings against label oracles, the calibration "
               "of its probabilities, the few-label pick, the default metric's choice.",
    "zoos": "The zoos the validations build, and what building them measured.",
}
#: a config field without a description fails the strict build (True once the schema describes every
#: field: a new field must come with its description)
REQUIRE_DESCRIPTIONS = True
#: pages other work writes (linked and in the navigation as soon as they exist)
PENDING = {
    "concepts/decision.md", "reference/decision-json.md", "concepts/validation-zoos.md",
    "concepts/few-label-pick.md", "how-to/classifier-heads.md", "concepts/calibration.md",
    "reference/environment.md", "reference/config-paths.md", "tutorials/python-api.md",
}
MARKER = re.compile(r"^<!--\s*zoorank:([\w-]+)\s*-->[ \t]*$", re.M)
ISSUE = re.compile(r"\b(issues?|contracts?)\s+\d+", re.I)


# -- benchmark results ---------------------------------------------------------------------------


def _group(stem: str) -> str:
    """The group of a results file: its script's folder (``validate_ranking_digits`` is written by
    ``validate_ranking.py``: the longest script name it starts with)."""
    scripts = {p.stem: p.parent.name for g in GROUPS for p in (BENCHMARKS / g).glob("*.py")}
    owners = [s for s in scripts if stem == s or stem.startswith(s + "_")]
    if owners:
        return scripts[max(owners, key=len)]
    return "performance" if stem.startswith("bench_") else "science"


def _results() -> dict[str, list[Path]]:
    out: dict[str, list[Path]] = {g: [] for g in GROUPS}
    for path in sorted(RESULTS.glob("*.md")):
        out[_group(path.stem)].append(path)
    return out


def _header(text: str) -> dict[str, str]:
    """Title, commit, date and command of a results file, from its first lines (the harness's
    header, or the hand-written preamble of an older file)."""
    lines = text.splitlines()
    title = next((line[2:].strip() for line in lines if line.startswith("# ")), "")
    head = "\n".join(lines[:14])
    date = re.search(r"\b(20\d\d-\d\d-\d\d)\b", head)
    commit = (re.search(r"(?:Commit|commit|on|at) `?([0-9a-f]{7,40})\b", head)
              or re.search(r"`([0-9a-f]{7,40})`", head))
    command = re.search(r"(?:`|^)((?:\S+=\S+ )*\S*python\S* \S*benchmarks/[^`\n]*)", head, re.M)
    return {"title": title, "commit": commit.group(1) if commit else "",
            "date": date.group(1) if date else "",
            "command": command.group(1).strip().rstrip("\\").strip() if command else ""}


def _result_page(path: Path) -> str:
    text = path.read_text()
    note = (f'!!! info "Results record"\n    `benchmarks/results/{path.name}` as committed: measured at '
            "the commit and date its header names, with the command that produced it.")
    if ISSUE.search(text):
        note += (" Written when it was measured: an \"issue N\" in it names the project's tracker "
                 "at that time.")
    return note + "\n\n" + text


def _group_index(group: str, paths: list[Path]) -> str:
    items = []
    for path in paths:
        h = _header(path.read_text())
        title = h["title"].split(" — ", 1)[-1] if " — " in h["title"] else h["title"]
        title = re.sub(r"\s*\((?:issues?|contract) [^)]*\)", "", title)
        when = ", ".join(x for x in (h["date"], f"commit `{h['commit']}`" if h["commit"] else "") if x)
        command = re.sub(r"^\S*\.venv/bin/python", "python", h["command"])
        item = f"- **[{path.stem}]({path.stem}.md)**: {_rst(title)}" + (f" ({when})" if when else "")
        if command:
            item += f"\n\n    ```\n    {command}\n    ```"
        items.append(item)
    listing = "\n\n".join(items) if items else "No results file yet."
    return (f"# {group.capitalize()} benchmarks\n\n{GROUPS[group]} Scripts: "
            f"`benchmarks/{group}/`; each page below is a results file of `benchmarks/results/`, "
            f"as committed, with the date and commit it was measured at and its command.\n\n"
            f"{listing}\n")


def _missing(path: str, docs_dir: str) -> bool:
    return path in PENDING and not (Path(docs_dir) / path).is_file()


def _prune(nav: list, docs_dir: str) -> list:
    """The navigation without the pending pages that do not exist yet."""
    out = []
    for item in nav:
        if isinstance(item, dict):
            (title, value), = item.items()
            if isinstance(value, list):
                value = _prune(value, docs_dir)
                if value:
                    out.append({title: value})
            elif isinstance(value, str) and _missing(value, docs_dir):
                log.info("navigation: %s not written yet, left out", value)
            else:
                out.append(item)
        elif isinstance(item, str) and _missing(item, docs_dir):
            log.info("navigation: %s not written yet, left out", item)
        else:
            out.append(item)
    return out


def on_config(config: Any) -> Any:
    """Fill the "Benchmarks" section of the navigation with the results pages, by group; leave out
    the pending pages not written yet."""
    config["nav"] = _prune(config["nav"] or [], config["docs_dir"])
    for item in config["nav"]:
        if isinstance(item, dict) and "Benchmarks" in item:
            section = item["Benchmarks"]
            for group, paths in _results().items():
                if paths:
                    section.append({group.capitalize(): [f"benchmarks/{group}/index.md"]
                                    + [{p.stem: f"benchmarks/{group}/{p.stem}.md"} for p in paths]})
    return config


def on_files(files: Files, config: Any) -> Files:
    for group, paths in _results().items():
        if not paths:
            continue
        files.append(File.generated(config, f"benchmarks/{group}/index.md",
                                    content=_group_index(group, paths)))
        for path in paths:
            files.append(File.generated(config, f"benchmarks/{group}/{path.stem}.md",
                                        content=_result_page(path)))
    return files


# -- reference pages -----------------------------------------------------------------------------


def _rst(text: str) -> str:
    """reST in docstrings and comments (``code``, :func:`name`) as markdown."""
    text = re.sub(r":(?:mod|func|class|data|meth|attr|obj):`~?([^`]+)`", r"`\1`", text)
    return text.replace("``", "`")


def _cell(text: Any) -> str:
    """One markdown table cell: one line, reST as markdown, a pipe outside code escaped."""
    parts = re.split(r"(`[^`]*`)", _rst(" ".join(str(text).split())))
    return "".join(p if p.startswith("`") else p.replace("|", "\\|") for p in parts)


def _type(schema: dict, defs: dict) -> str:
    """A JSON-schema type in words, with links to the sections of referenced models."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    for key in ("anyOf", "oneOf"):
        if key in schema:
            kinds = [_type(s, defs) for s in schema[key] if s.get("type") != "null"]
            return " or ".join(dict.fromkeys(kinds))
    if "enum" in schema:
        return "one of " + ", ".join(f"`{json.dumps(v)}`" for v in schema["enum"])
    if "const" in schema:
        return f"`{json.dumps(schema['const'])}`"
    kind = schema.get("type")
    if kind == "array":
        if "prefixItems" in schema:
            return "[" + ", ".join(_type(s, defs) for s in schema["prefixItems"]) + "]"
        items = schema.get("items")
        return f"list of {_type(items, defs)}" if items else "list"
    if kind == "object":
        extra = schema.get("additionalProperties")
        return f"mapping of {_type(extra, defs)}" if isinstance(extra, dict) and extra else "mapping"
    if isinstance(kind, list):
        return " or ".join(k for k in kind if k != "null")
    return {"string": "string", "integer": "integer", "number": "number", "boolean": "boolean",
            None: "any"}.get(kind, str(kind))


def _limits(schema: dict) -> str:
    words = {"minimum": "≥", "exclusiveMinimum": ">", "maximum": "≤", "exclusiveMaximum": "<",
             "minItems": "items ≥", "maxItems": "items ≤", "minLength": "length ≥",
             "maxLength": "length ≤"}
    parts = []
    for s in [schema, *schema.get("anyOf", [])]:
        parts += [f"{w} {s[k]}" for k, w in words.items() if k in s]
    return ", ".join(dict.fromkeys(parts))


def _models(cls: Any, found: dict[str, Any] | None = None) -> dict[str, Any]:
    """Every pydantic model reachable from ``cls``'s fields, by class name (the schema's ``$defs``)."""
    import typing

    from pydantic import BaseModel

    found = {} if found is None else found
    found[cls.__name__] = cls

    def walk(tp: Any) -> None:
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            if tp.__name__ not in found:
                _models(tp, found)
        for arg in typing.get_args(tp):
            walk(arg)

    for info in cls.model_fields.values():
        walk(info.annotation)
    return found


def _default(cls: Any, field: str, prop: dict) -> str:
    """A field's default: the schema's, else its default factory's value (a nested model: its own
    fields' defaults)."""
    from pydantic import BaseModel

    if "default" in prop:
        return f"`{json.dumps(prop['default'])}`"
    info = getattr(cls, "model_fields", {}).get(field)
    if info is None:
        return "—"
    try:
        value = info.get_default(call_default_factory=True)
    except TypeError:
        return "—"
    if isinstance(value, BaseModel):
        return "its fields' defaults"
    if isinstance(value, list):
        value = [v.model_dump(exclude_defaults=True) if isinstance(v, BaseModel) else v for v in value]
    try:
        return f"`{json.dumps(value)}`"
    except TypeError:
        return f"`{value!r}`"


def _model_table(name: str, schema: dict, defs: dict, missing: list[str], cls: Any = None) -> str:
    required = set(schema.get("required", ()))
    rows = []
    for field, prop in schema.get("properties", {}).items():
        description = prop.get("description", "")
        if not description:
            missing.append(f"{name}.{field}")
        default = "required" if field in required else _default(cls, field, prop)
        limits = _limits(prop)
        kind = _type(prop, defs) + (f" ({limits})" if limits else "")
        rows.append(f"| `{field}` | {_cell(kind)} | {_cell(default)} | {_cell(description) or '—'} |")
    head = "| field | type | default | description |\n|---|---|---|---|\n"
    return head + "\n".join(rows)


def config_reference() -> str:
    """Every field of the run config, from ``RunConfig.model_json_schema()``."""
    from zoorank.config import RunConfig

    schema = RunConfig.model_json_schema()
    defs = schema.get("$defs", {})
    missing: list[str] = []
    classes = _models(RunConfig)
    parts = ["## RunConfig (the top level)", _rst(schema.get("description", "")),
             _model_table("RunConfig", schema, defs, missing, RunConfig)]
    for name in sorted(defs):
        parts += [f"## {name}", _rst(defs[name].get("description", "")),
                  _model_table(name, defs[name], defs, missing, classes.get(name))]
    if missing:
        (log.warning if REQUIRE_DESCRIPTIONS else log.info)(
            "config fields without a description: %s", ", ".join(missing))
    return "\n\n".join(p for p in parts if p)


def _expand(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    if not action.help or action.help == argparse.SUPPRESS:
        return ""
    try:
        return parser._get_formatter()._expand_help(action)
    except (KeyError, TypeError, ValueError):
        return action.help


def _commands(parser: argparse.ArgumentParser, prefix: str) -> list[str]:
    parts = []
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        helps = {a.dest: a.help for a in action._choices_actions}
        for name, sub in action.choices.items():
            command = f"{prefix} {name}"
            rows = []
            for a in sub._actions:
                if isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)):
                    continue
                names = ", ".join(a.option_strings) or a.dest
                if a.metavar and a.option_strings:
                    names += f" {a.metavar}"
                elif a.option_strings and a.nargs != 0 and a.choices is None:
                    names += f" {a.dest.upper()}"
                choices = (" (one of " + ", ".join(f"`{c}`" for c in a.choices) + ")"
                           if a.choices else "")
                rows.append(f"| `{names}` | {_cell(_expand(sub, a))}{choices} |")
            usage = sub.format_usage().strip().removeprefix("usage: ")
            parts += [f"## `{command}`", _cell(helps.get(name) or sub.description or ""),
                      f"```\n{usage}\n```"]
            if sub.description and helps.get(name):
                parts.append(sub.description)
            if rows:
                parts.append("| argument | meaning |\n|---|---|\n" + "\n".join(rows))
            if sub.epilog:
                parts.append(f"```\n{sub.epilog.strip()}\n```")
            parts += _commands(sub, command)
    return parts


def cli_reference() -> str:
    """Every command and option, from ``zoorank.cli.build_parser()``."""
    from zoorank.cli import build_parser

    parser = build_parser()
    common = [f"| `{', '.join(a.option_strings)}` | {_cell(_expand(parser, a))} |"
              for a in parser._actions if a.option_strings and not isinstance(a, argparse._HelpAction)]
    parts = ["## `zoorank`", _cell(parser.description or ""),
             f"```\n{parser.format_usage().strip().removeprefix('usage: ')}\n```",
             "| option | meaning |\n|---|---|\n" + "\n".join(common)]
    if parser.epilog:  # the environment variables and exit status: pages of their own
        parts.append("`zoorank --help` also lists the [environment variables](environment.md) and "
                     "the exit status ([failure handling](../concepts/failure-handling.md)).")
    return "\n\n".join(p for p in parts + _commands(parser, "zoorank") if p)


def metrics_reference() -> str:
    """Every registered metric (``zoorank.metrics.registry.REGISTRY``)."""
    import zoorank.metrics  # noqa: F401  (registers every metric)
    from zoorank.metrics.registry import REGISTRY

    rows = []
    for name, m in sorted(REGISTRY.items(), key=lambda kv: (kv[1].inputs, kv[0])):
        if m.target is not None:
            direction = f"closest to {m.target:g}"
        else:
            direction = "higher is better" if m.direction > 0 else "lower is better"
        doc = m.description or (m.function.__doc__ or "" if m.function else "")
        first = doc.strip().split("\n\n")[0] if doc else ""
        options = ", ".join(f"`{o}`" for o in m.options) or "—"
        floor = "—" if m.tune_floor is None else f"{m.tune_floor:g}"
        rows.append(f"| `{name}` | {m.inputs} | {direction} | {'yes' if m.primary else 'no'} | "
                    f"{options} | {floor} | {_cell(first) or '—'} |")
    # in a div the site's CSS keeps names whole (docs/stylesheets/extra.css: .metrics-reference)
    return ("<div class=\"metrics-reference\" markdown>\n\n"
            "| metric | inputs | direction | may order the board | `score:` options | Tune floor "
            "| what it measures |\n|---|---|---|---|---|---|---|\n" + "\n".join(rows)
            + "\n\n</div>")


def store_reference() -> str:
    """The store's tables and files: the paths of ``zoorank.store.layout`` with their comments, and
    the key and columns each table schema in the code declares."""
    import ast

    import zoorank.store.layout as layout

    source = Path(layout.__file__).read_text()
    comments: dict[str, str] = {}
    pending: list[str] = []
    for line in source.splitlines():
        if line.startswith("#:"):
            pending.append(line[2:].strip())
        elif m := re.match(r"^([A-Z_]+) = ", line):
            comments[m.group(1)] = " ".join(pending)
            pending = []
        else:
            pending = []
    rows = []
    for name, value in vars(layout).items():
        if name.isupper() and isinstance(value, str):
            rows.append(f"| `<store>/{value}` | `{name}` | {_cell(comments.get(name, '')) or '—'} |")
    tree = ast.parse(source)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.args.args:
            args = ", ".join(a.arg.rstrip("_").upper() for a in node.args.args)
            try:
                path = getattr(layout, node.name)(*[a.arg.rstrip("_").upper() for a in node.args.args])
            except (TypeError, ValueError):
                continue
            doc = ast.get_docstring(node) or ""
            rows.append(f"| `<store>/{path}` | `{node.name}({args.lower()})` | {_cell(doc) or '—'} |")
    paths = "| path | in `zoorank.store.layout` | what |\n|---|---|---|\n" + "\n".join(rows)
    schemas = []
    for module, names in (("zoorank.store.schema", ("MANIFEST", "METRICS")),
                          ("zoorank.oracle.resample", ("RESAMPLES", "HEALTH"))):
        mod = __import__(module, fromlist=["_"])
        for table in names:
            key = getattr(mod, f"{table}_KEY", None)
            columns = getattr(mod, f"{table}_COLUMNS", None)
            if columns:
                schemas.append(f"| `{table.lower()}` | {', '.join(f'`{c}`' for c in key or ())} | "
                               f"{', '.join(f'`{c}`' for c in columns)} | `{module}` |")
    keys = ("| table | key | columns | declared in |\n|---|---|---|---|\n" + "\n".join(schemas))
    return ("### Paths\n\n" + paths + "\n\n### Table keys and columns declared in the code\n\n"
            + keys)


def examples_page() -> str:
    """Every config of ``examples/`` as written (each validated by the test suite)."""
    table = (ROOT / "examples" / "README.md").read_text()
    rows = [line for line in table.splitlines() if line.startswith("| [")]
    parts = []
    listed = re.findall(r"^\| \[([^]]+\.yaml)\]", table, re.M)
    paths = sorted((ROOT / "examples").glob("*.yaml"),
                   key=lambda p: (listed.index(p.name) if p.name in listed else len(listed), p.name))
    for path in paths:
        what = next((re.sub(r"\[[^]]+\]\([^)]+\)", "", row).split("|")[2].strip()
                     for row in rows if f"[{path.name}]" in row), "")
        parts += [f"## `{path.name}`", _rst(what), f"```yaml\n{path.read_text().rstrip()}\n```"]
    return "\n\n".join(p for p in parts if p)


def decision_reference() -> str:
    """decision.json's keys from :mod:`zoorank.decide.decision_schema` (the schema RANK checks)."""
    from zoorank.decide.decision_schema import reference

    return reference()


GENERATORS = {"examples": examples_page, "config": config_reference, "cli": cli_reference,
              "metrics": metrics_reference, "store": store_reference,
              "decision-json": decision_reference}


LINK = re.compile(r"\[([^\]]+)\]\(([^)#\s]+\.md)(#[^)\s]*)?\)")


def _unlink_pending(markdown: str, page: Any, docs_dir: str) -> str:
    """A link to a pending page that does not exist yet, as its text."""
    base = Path(page.file.src_uri).parent

    def unlink(match: re.Match) -> str:
        target = (base / match.group(2)).as_posix()
        parts: list[str] = []
        for part in target.split("/"):
            if part == "..":
                parts = parts[:-1]
            elif part != ".":
                parts.append(part)
        target = "/".join(parts)
        if _missing(target, docs_dir):
            log.info("%s: link to %s (not written yet) left as text", page.file.src_uri, target)
            return match.group(1)
        return match.group(0)

    return LINK.sub(unlink, markdown)


RESULT_SPAN = re.compile(r"(?<!\[)`benchmarks/results/([\w-]+)\.md`")


def _link_results(markdown: str, page: Any) -> str:
    """A code span naming a results file (`` `benchmarks/results/x.md` ``) links to its page."""
    if page.file.generated_by is not None:
        return markdown  # a results page: left as written
    depth = page.file.src_uri.count("/")
    groups = {p.stem: g for g, paths in _results().items() for p in paths}

    def link(match: re.Match) -> str:
        name = match.group(1)
        if name not in groups:
            return match.group(0)
        return f"[{match.group(0)}]({'../' * depth}benchmarks/{groups[name]}/{name}.md)"

    return RESULT_SPAN.sub(link, markdown)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    markdown = _link_results(_unlink_pending(markdown, page, config["docs_dir"]), page)

    def generate(match: re.Match) -> str:
        name = match.group(1)
        if name not in GENERATORS:
            log.warning("%s: unknown generated section %r", page.file.src_uri, name)
            return match.group(0)
        return GENERATORS[name]()

    return MARKER.sub(generate, markdown)


RESULT_CODE = re.compile(r'(?<!">)<code>(?:benchmarks/)?results/([\w-]+)\.md</code>')


def on_page_content(html: str, page: Any, config: Any, files: Any) -> str:
    """reST roles in rendered docstrings (``:class:`x``` → ``x``): mkdocstrings keeps them as text.
    A results file named in included text (``benchmarks/README.md``'s `results/x.md`) links to its
    page, as :func:`_link_results` does for a page's own markdown."""
    from mkdocs.utils import get_relative_url

    html = re.sub(r":(?:mod|func|class|data|meth|attr|obj):(<code>)~?", r"\1", html)
    if page.file.generated_by is not None:
        return html
    groups = {p.stem: g for g, paths in _results().items() for p in paths}

    def link(match: re.Match) -> str:
        name = match.group(1)
        if name not in groups:
            return match.group(0)
        url = get_relative_url(f"benchmarks/{groups[name]}/{name}/", page.url)
        return f'<a href="{url}">{match.group(0)}</a>'

    return RESULT_CODE.sub(link, html)
