"""What the EMBED stage shows: the live progress (rich) and the summary table; Ray Data's quiet mode.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import pandas as pd


class Display:
    """The live rich progress of the run (images/s and models done)."""

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
            disable=not enabled,
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



def quiet_ray_data() -> None:
    import ray

    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.execution_options.preserve_order = False
    for name in ("ray.data", "ray.data._internal.execution.streaming_executor"):
        logging.getLogger(name).setLevel(logging.WARNING)


def print_summary(rows: pd.DataFrame, skipped: set[tuple[str, str, str]], enabled: bool,
                  preprocessing: dict[str, str] | None = None) -> None:
    """The embed table (one row per entry, with each model's resolved preprocessing) and the
    failures; ``preprocessing`` maps model_id → ``zoorank.zoo.describe_preprocessing``."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console()
    if rows.empty:
        return
    if enabled:
        table = Table(title="embed")
        for col in ("dataset", "view", "model", "status", "rows", "dim", "seconds",
                    "preprocessing"):
            table.add_column(col, justify="right" if col in ("rows", "dim", "seconds") else "left")
        for r in rows.to_dict("records"):
            key = (r["dataset"], r["view"], r["model_id"])
            status = "done (cached)" if key in skipped else str(r["status"])
            style = "red" if r["status"] == "failed" else None
            dim = "" if r["dim"] is None or pd.isna(r["dim"]) else str(int(r["dim"]))
            table.add_row(r["dataset"], r["view"], r["model_id"], status, str(int(r["rows"] or 0)),
                          dim, f"{float(r['seconds'] or 0):.2f}",
                          escape((preprocessing or {}).get(r["model_id"], "")), style=style)
        console.print(table)
    failed = rows[rows["status"] == "failed"]
    bad = rows[(rows["status"] == "done") & (rows["bad_images"].fillna(0) > 0)]
    for (model_id, error), group in failed.groupby(["model_id", "error"], sort=False):
        where = ", ".join(f"{d}/{v}" for d, v in zip(group["dataset"], group["view"]))
        console.print(f"[red]failed[/red] {escape(str(model_id))} ({escape(where)}): "
                      f"{escape(str(error))}")
    if len(failed):
        console.print(f"{len(failed)} of {len(rows)} embeddings failed (recorded in the manifest)")
    for (dataset, view), n in bad.groupby(["dataset", "view"])["bad_images"].max().items():
        console.print(escape(f"{dataset}/{view}: skipped {int(n)} undecodable image(s)"))
    mixed = mixed_versions(rows)
    if mixed:
        console.print(f"[yellow]warning[/yellow]: {escape(mixed)}")


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
