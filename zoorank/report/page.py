"""The report page from jinja2 templates: a page is a list of :class:`Section` (plain data).

Every piece of text reaches the HTML through a template of ``zoorank/report/templates/`` rendered
by one ``jinja2.Environment(autoescape=True, undefined=StrictUndefined)``: a model id such as
``<img src=x onerror=alert(1)>``, an error message or a path is shown as text, with nothing
escaped by hand, and a template that names a missing value fails instead of printing nothing.

**Adding a section** needs no HTML. Build a :class:`Section` and append it to the page's list
(``run_report`` does so for its own sections)::

    Section(id="topset-vs-oracle", title="Label-free top set vs the oracle's top set",
            sentences=["The oracle's top set has **3** models; `rankme`'s top set holds 2 of them."],
            warnings=["2 models are 10× wider than the rest (a confound)."],
            table=Table(rows=[{"model_id": "r18-s0", "oracle_rank": 1, "in_both": True}, ...]),
            plots=[Plot(id="labels-curve", figure={"data": [...], "layout": {...}})],
            images=[Image(name="curve.png", alt="...", data=png_bytes)])

* ``sentences`` and ``warnings``: plain text, one paragraph each; ```code``` and ``**bold**``
  are the only inline markup (:func:`inline`); everything else is shown as typed.
* ``table``: rows as a list of dicts (columns: ``Table.columns`` or the first row's keys). Floats
  are shown with 4 significant digits, NaN/None as "—". A table longer than ``page_size`` rows gets
  a filter box and pages (a small inline script; with scripts off every row shows).
* ``plots``: Plotly figures as plain dicts (``{"data": [...], "layout": {...}}``, or
  ``fig.to_plotly_json()``); put the model id in each trace's ``text`` so hovering a point names it.
  plotly.js is inlined once per page, only when the page has a plot (the file stays self-contained
  and works offline).
* ``images``: PNG bytes, written beside ``index.html``.
* ``subsections``: sections one heading level down (a section with an empty ``title`` has none).
* ``template`` / ``context``: a section that needs its own layout names a template of
  ``templates/`` (which may extend ``section.html.j2``) and passes what it shows in ``context``;
  a template that wraps a table of its own in the ``paged`` macro of ``pager.html.j2`` says so
  with ``context["uses_pager"] = True`` (the page then carries the table script).

Cost: rendering is linear in the rows and points shown.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import numpy as np
from markupsafe import Markup, escape

#: rows per page of a paged table (a table with more rows gets a filter box and a pager).
PAGE_SIZE = 50


@dataclass(frozen=True)
class Table:
    """Rows as dicts; ``columns`` orders them (default: the first row's keys)."""

    rows: Sequence[Mapping[str, Any]]
    columns: Sequence[str] | None = None
    id: str | None = None
    page_size: int = PAGE_SIZE

    def header(self) -> list[str]:
        if self.columns is not None:
            return list(self.columns)
        return list(self.rows[0]) if self.rows else []

    def text_columns(self) -> set[str]:
        """Columns shown left-aligned: those holding any string."""
        return {c for c in self.header() if any(isinstance(r.get(c), str) for r in self.rows)}

    @property
    def paged(self) -> bool:
        return len(self.rows) > self.page_size


@dataclass(frozen=True)
class Plot:
    """A Plotly figure as a dict (``data`` traces and ``layout``); ``id`` is its element's id
    (unique on the page, like every section's)."""

    id: str
    figure: Mapping[str, Any]
    height: int = 420


@dataclass(frozen=True)
class Image:
    """A PNG written beside the page as ``name``."""

    name: str
    alt: str
    data: bytes


@dataclass(frozen=True)
class Section:
    """One part of the page (see the module docstring)."""

    id: str
    title: str
    sentences: Sequence[str] = ()
    warnings: Sequence[str] = ()
    table: Table | None = None
    plots: Sequence[Plot] = ()
    images: Sequence[Image] = ()
    subsections: Sequence[Section] = ()
    template: str = "section.html.j2"
    context: Mapping[str, Any] = field(default_factory=dict)
    css_class: str = ""


_CODE = re.compile(r"`([^`]+)`")
_BOLD = re.compile(r"\*\*(.+?)\*\*")


def inline(text: Any) -> Markup:
    """``text`` escaped, then ```x``` → ``<code>x</code>`` and ``**x**`` → ``<b>x</b>``."""
    out = str(escape(str(text)))
    out = _CODE.sub(r"<code>\1</code>", out)
    return Markup(_BOLD.sub(r"<b>\1</b>", out))


def cell(value: Any) -> str:
    """A table cell's text: floats to 4 significant digits, NaN and None as "—"."""
    if value is None:
        return "—"
    if isinstance(value, (float, np.floating)):
        return "—" if math.isnan(value) else f"{value:.4g}"
    return str(value)


def plot_html(plot: Plot) -> Markup:
    """The figure's div and its ``Plotly.newPlot`` call (plotly.js itself comes once per page).

    Plotly writes the figure as JSON with ``<`` escaped (``\\u003c``), so no string in it can end
    the script; hover labels are drawn as SVG text."""
    import plotly.io as pio

    layout = {"height": plot.height, **plot.figure.get("layout", {})}
    figure = {"data": list(plot.figure.get("data", [])), "layout": layout}
    return Markup(pio.to_html(figure, full_html=False, include_plotlyjs=False, div_id=plot.id,
                              validate=False, default_height=f"{layout['height']}px",
                              config={"displaylogo": False, "responsive": True}))


@cache
def environment() -> Any:
    """The report's jinja2 environment: package templates, autoescape, strict undefined."""
    import jinja2

    env = jinja2.Environment(loader=jinja2.PackageLoader("zoorank.report", "templates"),
                             autoescape=True, undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    env.filters.update(inline=inline, cell=cell, plot=plot_html)
    env.globals["render_section"] = render_section
    return env


def render_section(section: Section, level: int = 2) -> Markup:
    """One section through its template (``section``, ``level`` and its ``context`` in scope)."""
    template = environment().get_template(section.template)
    return Markup(template.render(section=section, level=level, **section.context))


def walk(sections: Sequence[Section]) -> Iterator[Section]:
    for s in sections:
        yield s
        yield from walk(s.subsections)


def page_images(sections: Sequence[Section]) -> dict[str, bytes]:
    """Every PNG the sections show, by file name."""
    return {image.name: image.data for s in walk(sections) for image in s.images}


#: where plotly.js goes in the rendered page, after the page is redacted.
_PLOTLY_SLOT = "/*zoorank:plotly.js*/"


def render_page(title: str, sections: Sequence[Section], heading: str | None = None) -> str:
    """The whole page, redacted (:func:`zoorank.store.redact.redact`: no secret in a model id, error or
    path is written): inline CSS, plotly.js once when any section has a plot, the table script
    once when any table is paged. ``heading``: the page's ``<h1>`` (default: ``title``; ``""``:
    none, when the first section brings its own, as the decision card does).

    plotly.js goes in after the redaction: it is the library's own constant text, and the
    redactor would mask parts of its code that look like ``;key=value``."""
    from zoorank.store.redact import redact

    every = list(walk(sections))
    ids = [s.id for s in every] + [p.id for s in every for p in s.plots]
    if len(set(ids)) < len(ids):
        raise ValueError(f"report sections and plots share ids: "
                         f"{sorted({i for i in ids if ids.count(i) > 1})}")
    has_plots = any(s.plots for s in every)
    paged = any(t is not None and t.paged for s in every
                for t in (s.table, *[v for v in s.context.values() if isinstance(v, Table)])
                ) or any(s.context.get("uses_pager") for s in every)
    page = redact(environment().get_template("page.html.j2").render(
        title=title, heading=title if heading is None else heading,
        sections=[render_section(s) for s in sections],
        plotly_js=Markup(_PLOTLY_SLOT) if has_plots else "", paged=paged))
    if has_plots:
        from plotly.offline import get_plotlyjs

        head, tail = page.split(_PLOTLY_SLOT, 1)
        page = head + get_plotlyjs() + tail
    return page
