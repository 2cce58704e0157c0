"""What the EMBED stage shows: the live progress (rich) and the summary table; Ray Data's quiet mode.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np
import pandas as pd

from zoorank.console import progress_enabled


class Display:
    """The live rich progress of the run: entries done of the entries planned, and images read of
    the images the chunks will read (each chunk reads its group's decoded views once, whatever
    its number of models: one read, many models).

    Drawn (on stderr) only when ``enabled`` and the console takes bars
    (:func:`zoorank.console.progress_enabled`: a terminal, ``ZOORANK_PROGRESS`` not ``0``), like
    every stage's bar; the counts are kept either way (:meth:`state`)."""

    def __init__(self, total_entries: int, enabled: bool) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self.console = Console(stderr=True)
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(),
            console=self.console,
            disable=not (enabled and progress_enabled()),
            transient=False,
        )
        self.models = self.progress.add_task("entries done", total=total_entries, rate="")
        self.images = None
        self.t0 = time.perf_counter()
        self.count = 0

    def __enter__(self) -> Display:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.__exit__(*exc)

    def pipeline(self, label: str, total: int) -> None:
        """A new images bar of ``total`` images (the view rows the chunks' tasks will read)."""
        if self.images is not None:
            self.progress.remove_task(self.images)
        self.images = self.progress.add_task(label, total=total, rate="")
        self.t0, self.count = time.perf_counter(), 0

    def advance_images(self, n: int) -> None:
        self.count += n
        rate = self.count / max(1e-9, time.perf_counter() - self.t0)
        self.progress.update(self.images, advance=n, rate=f"{rate:,.0f} img/s")

    def entries_done(self, n: int) -> None:
        self.progress.update(self.models, advance=n)

    def state(self) -> dict[str, tuple[int, int]]:
        """``{bar: (completed, total)}`` of each bar (for tests and benchmarks)."""
        out = {}
        for name, task_id in (("entries", self.models), ("images", self.images)):
            if task_id is not None:
                task = self.progress.tasks[[t.id for t in self.progress.tasks].index(task_id)]
                out[name] = (int(task.completed), int(task.total or 0))
        return out


def quiet_ray_data() -> None:
    import ray

    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.execution_options.preserve_order = False
    for name in ("ray.data", "ray.data._internal.execution.streaming_executor"):
        logging.getLogger(name).setLevel(logging.WARNING)


#: entries up to which the embed summary is a table (one row per entry); beyond, counts only.
SUMMARY_TABLE_MAX = 40

#: failed models named one per line (the rest counted; every one is in the manifest).
MAX_FAILED_SHOWN = 8

#: distinct failure reasons listed with their models; distinct preprocessing recipes printed.
MAX_REASONS_SHOWN = 5


def _one_line(text: object, width: int = 240) -> str:
    """``text`` on one line (newlines as spaces), cut to ``width`` characters with "…"."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _some(ids: list[str], k: int = 3) -> str:
    """The first ``k`` of ``ids`` and "+N more"."""
    return ", ".join(ids[:k]) + (f" (+{len(ids) - k} more)" if len(ids) > k else "")


def summary_lines(rows: pd.DataFrame, skipped: set[tuple[str, str, str]],
                  preprocessing: dict[str, str] | None = None,
                  where: str | None = None) -> list[str]:
    """The embed summary whatever the zoo's size (rich markup, values escaped): entries by status,
    the failed models (at most :data:`MAX_FAILED_SHOWN` one per line, else grouped by reason),
    undecodable images per dataset/view, the preprocessing recipes, and where the full table is
    (``where``: the manifest's location). At most about 25 lines. O(entries)."""
    from rich.markup import escape

    lines: list[str] = []
    models = rows["model_id"].nunique()
    status = rows["status"].astype(str)
    cached = sum((d, v, m) in skipped for d, v, m in zip(rows["dataset"], rows["view"],
                                                          rows["model_id"]))
    counts = status.value_counts()
    parts = [f"{int(counts.get('done', 0))} done"
             + (f" ({cached} cached)" if cached else "")]
    parts += [f"{int(n)} {escape(k)}" for k, n in counts.items() if k != "done"]
    lines.append(f"embed: {len(rows)} entries ({models} models × "
                 f"{rows[['dataset', 'view']].drop_duplicates().shape[0]} dataset/views): "
                 + ", ".join(parts))
    failed = rows[status == "failed"]
    by_model = list(failed.groupby(["model_id", "error"], sort=False, dropna=False))
    if 0 < len(by_model) <= MAX_FAILED_SHOWN:
        for (model_id, error), group in by_model:
            where_ = ", ".join(f"{d}/{v}" for d, v in zip(group["dataset"], group["view"]))
            lines.append(f"[red]failed[/red] {escape(str(model_id))} ({escape(where_)}): "
                         f"{escape(_one_line(error))}")
    elif by_model:
        reasons = failed.groupby("error", sort=False, dropna=False)["model_id"].unique()
        reasons = reasons.iloc[np.argsort([-len(v) for v in reasons], kind="stable")]
        for error, ids in reasons.head(MAX_REASONS_SHOWN).items():
            lines.append(f"[red]failed[/red] {len(ids)} model(s): {escape(_one_line(error, 160))} "
                         f"— {escape(_some([str(i) for i in ids]))}")
        if len(reasons) > MAX_REASONS_SHOWN:
            rest = reasons.iloc[MAX_REASONS_SHOWN:]
            lines.append(f"[red]failed[/red] +{sum(len(v) for v in rest)} more model(s) with "
                         f"{len(rest)} other reason(s)")
    if len(failed):
        lines.append(f"{len(failed)} of {len(rows)} embeddings failed (recorded in the manifest)")
    bad = rows[(status == "done") & (rows["bad_images"].fillna(0) > 0)]
    for (dataset, view), n in bad.groupby(["dataset", "view"])["bad_images"].max().items():
        lines.append(escape(f"{dataset}/{view}: skipped {int(n)} undecodable image(s)"))
    recipes: dict[str, list[str]] = {}
    for mid in dict.fromkeys(rows["model_id"]):
        recipes.setdefault((preprocessing or {}).get(mid, ""), []).append(str(mid))
    shown = [(r, ids) for r, ids in recipes.items() if r]
    for recipe, ids in shown[:MAX_REASONS_SHOWN]:
        lines.append(escape(f"preprocessing of {_some(ids)}: {recipe}"))
    if len(shown) > MAX_REASONS_SHOWN:
        lines.append(f"+{len(shown) - MAX_REASONS_SHOWN} more preprocessing recipes "
                     "(`zoorank zoo CONFIG` lists each model's)")
    mixed = mixed_versions(rows)
    if mixed:
        lines.append(f"[yellow]warning[/yellow]: {escape(mixed)}")
    if where and len(rows) > SUMMARY_TABLE_MAX:
        lines.append(escape(f"every entry (status, rows, dim, seconds, error): the manifest "
                            f"table {where}"))
    return lines


def print_summary(rows: pd.DataFrame, skipped: set[tuple[str, str, str]], enabled: bool,
                  preprocessing: dict[str, str] | None = None, where: str | None = None) -> None:
    """The embed summary: a table of the entries for a small zoo (at most
    :data:`SUMMARY_TABLE_MAX` entries, and ``enabled``), then :func:`summary_lines`."""
    from rich.table import Table

    from zoorank.console import output_console, table_box

    console = output_console()
    if rows.empty:
        return
    if enabled and len(rows) <= SUMMARY_TABLE_MAX:
        table = Table(title="embed", box=table_box(console), title_justify="left",
                      pad_edge=False)
        for col in ("dataset", "view", "model", "status", "rows", "dim", "seconds"):
            table.add_column(col, justify="right" if col in ("rows", "dim", "seconds") else "left",
                             overflow="fold")
        for r in rows.to_dict("records"):
            key = (r["dataset"], r["view"], r["model_id"])
            status = "done (cached)" if key in skipped else str(r["status"])
            style = "red" if r["status"] == "failed" else None
            dim = "" if r["dim"] is None or pd.isna(r["dim"]) else str(int(r["dim"]))
            table.add_row(r["dataset"], r["view"], r["model_id"], status, str(int(r["rows"] or 0)),
                          dim, f"{float(r['seconds'] or 0):.2f}", style=style)
        console.print(table)
    for line in summary_lines(rows, skipped, preprocessing if enabled else None, where):
        console.print(line)


def mixed_versions(rows: pd.DataFrame) -> str | None:
    """A sentence naming the libraries whose versions differ between done entries, or None.

    Embeddings of one store made with different torch/timm/transformers/Pillow versions may not be
    comparable; the manifest's ``versions`` column records them per entry.
    """
    import json

    if "versions" not in rows:
        return None
    seen: dict[str, set[str]] = {}
    for text in rows.loc[rows["status"] == "done", "versions"].dropna():
        try:
            for lib, version in json.loads(text).items():
                seen.setdefault(lib, set()).add(version)
        except (TypeError, ValueError):
            continue
    differ = {lib: sorted(v) for lib, v in seen.items() if len(v) > 1}
    if not differ:
        return None
    return ("entries of this store were embedded with different library versions ("
            + "; ".join(f"{lib} {' / '.join(v)}" for lib, v in sorted(differ.items()))
            + "); re-embed them with one environment for comparable results")
