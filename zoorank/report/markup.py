"""The report page's HTML building blocks: its inline CSS, table cells, tables and image links."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

CSS = """
body { font-family: system-ui, -apple-system, Segoe UI, Helvetica, Arial, sans-serif;
       margin: 2em auto; max-width: 1200px; color: #222; padding: 0 1em; }
h1 { font-size: 1.6em; } h2 { border-bottom: 1px solid #ddd; padding-bottom: .2em; margin-top: 2em; }
table { border-collapse: collapse; font-size: .85em; margin: .5em 0 1em; }
th, td { border: 1px solid #ddd; padding: .25em .5em; text-align: right; }
th { background: #f4f4f4; } td.text, th.text { text-align: left; }
tr:nth-child(even) td { background: #fafafa; }
img { max-width: 100%; border: 1px solid #eee; margin: .5em 0; }
.note { color: #666; font-size: .9em; } details { margin: .5em 0 1.5em; }
.badge { display: inline-block; padding: 0 .45em; margin: 0 .15em; border-radius: .6em;
         font-size: .8em; background: #fde2b5; color: #7a4b00; }
.badge.blocking { background: #f6c3c3; color: #7a0000; }
.decision { background: #f7fbff; border: 1px solid #cfe0f3; padding: .6em 1.2em; }
.decision h2 { margin-top: .4em; }
.warn { background: #fff4e0; border-left: 4px solid #e6a23c; padding: .4em .8em; }
.agree { border-left: 4px solid #4caf50; padding: .4em .8em; }
.disagree { border-left: 4px solid #e05a47; padding: .4em .8em; background: #fff3f1; }
dl.settings { display: grid; grid-template-columns: max-content auto; gap: .2em 1.2em; }
dl.settings dt { font-weight: 600; } dl.settings dd { margin: 0; }
"""


def fmt_cell(v: Any) -> str:
    if isinstance(v, (float, np.floating)):
        return "—" if math.isnan(v) else f"{v:.4g}"
    return html.escape(str(v))


def html_table(frame: pd.DataFrame, text_columns: Sequence[str] = ()) -> str:
    text = set(text_columns) | {c for c in frame.columns if frame[c].dtype == object}
    head = "".join(f'<th class="{"text" if c in text else ""}">{html.escape(str(c))}</th>'
                   for c in frame.columns)
    body = []
    for row in frame.itertuples(index=False):
        cells = "".join(f'<td class="{"text" if c in text else ""}">{fmt_cell(v)}</td>'
                        for c, v in zip(frame.columns, row))
        body.append(f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def img_tag(name: str, alt: str) -> str:
    return f'<img src="{html.escape(name)}" alt="{html.escape(alt)}">'
