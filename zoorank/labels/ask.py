"""``zoorank ask CONFIG --budget K``: one round of images to label, chosen to separate the models
that may be best, written as a labelling task people can do anywhere.

The round goes to ``<store>/asks/<round>/``:

* ``to_label.csv``: ``sample_id``, an empty ``label``, the image's ``source``; filled in, it is what
  ``zoorank label`` takes back;
* ``index.html``: a self-contained page (thumbnails inlined as data URIs, the class names,
  keyboard shortcuts, a button that saves the filled CSV; no server);
* ``label_studio.json``: Label Studio's import format (tasks with ``data.image`` and ``meta``)
  and ``label_studio.xml``, the labelling config to paste into the project.

An image is never asked twice: neither one already labelled (its own label, or one given back)
nor one asked in another round, answered or not (an image someone skipped is likely hard to label;
asking it again would stall the rounds). Choice: ``--sampler`` (default
:data:`zoorank.labels.stopping.DEFAULT_SAMPLER`; :func:`zoorank.labels.stopping.embedding_batch`),
or for a classifier zoo (every model's head kept) CODA on the heads' predictions
(:mod:`zoorank.labels.head_predictions`). ``round.json`` records the round (its images, how they
were chosen) and the pick as it stood before it (:func:`zoorank.labels.stopping.few_label_pick`:
the model, its p(best | labels) and the posterior it reads), as the console prints it.
"""

from __future__ import annotations

import base64
import csv
import io
import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from zoorank.catalog.context import RunContext
from zoorank.config import RunConfig
from zoorank.decide.next_step import config_shown
from zoorank.errors import InputError
from zoorank.labels.head_predictions import SAMPLERS as HEAD_SAMPLERS
from zoorank.labels.head_predictions import head_batch, with_head_predictions
from zoorank.labels.pool import Pool, load_pool
from zoorank.labels.stopping import (
    console_lines,
    embedding_batch,
    evidence,
    few_label_pick,
    resolve_sampler,
    stopping_rule,
)
from zoorank.store import Store
from zoorank.store.layout import ASKS_DIR, ask_dir

#: keys of the page's shortcuts, one per class in order (more classes: pick from the list).
SHORTCUTS = "0123456789abcdefghijklmnopqrstuvwxyz"
THUMBNAIL = 96  # pixels, longest side


@dataclass
class AskRound:
    round: int
    dataset: str
    sample_ids: list[int]
    paths: dict[str, str]
    rule: dict[str, Any]


def asked_before(store: Store, dataset: str, skip_round: int | None = None) -> dict[int, int]:
    """sample_id → the round that asked for it, over every earlier round of ``dataset``."""
    out: dict[int, int] = {}
    for name in sorted(store.list_dirs(ASKS_DIR) if store.exists(ASKS_DIR) else []):
        if not name.isdigit() or int(name) == skip_round:
            continue
        rel = f"{ask_dir(int(name))}/to_label.csv"
        if not store.exists(rel):
            continue
        meta = f"{ask_dir(int(name))}/round.json"
        if store.exists(meta) and store.read_json(meta).get("dataset") != dataset:
            continue
        for row in csv.DictReader(io.StringIO(store.read_text(rel))):
            if row.get("sample_id", "").strip().lstrip("-").isdigit():
                out.setdefault(int(row["sample_id"]), int(name))
    return out


def next_round(store: Store) -> int:
    names = store.list_dirs(ASKS_DIR) if store.exists(ASKS_DIR) else []
    return max([int(n) for n in names if n.isdigit()], default=0) + 1


def thumbnails(pool: Pool, sample_ids: list[int]) -> dict[int, str]:
    """sample_id → a PNG data URI of the image (longest side :data:`THUMBNAIL`). Reads only
    those images (:func:`zoorank.data.sample_reader.read_units`); one that cannot be decoded gets an
    empty string (the page says so)."""
    from zoorank.data.images import decode_image
    from zoorank.data.sample_reader import read_unit, read_units

    index = pool.catalog.indexes[pool.dataset]
    wanted = np.asarray(sorted(sample_ids), dtype=np.int64)
    payloads: dict[int, Any] = {}
    if index.kind == "memory":
        for s in wanted:
            payloads[int(s)] = index.arrays[int(s)]
    else:
        for unit in read_units(index, wanted):
            for block in read_unit(index, unit):
                for s, p in zip(block["sample_id"], block["payload"]):
                    payloads[int(s)] = p
    out = {}
    for s in sample_ids:
        try:
            img = decode_image(payloads.get(int(s)), f"sample_id {s}")
        except InputError:
            out[int(s)] = ""
            continue
        scale = THUMBNAIL / max(img.size)
        if scale < 1 or max(img.size) < 48:  # tiny images (digits: 8 px) are enlarged, crisp
            size = (max(1, round(img.size[0] * scale)), max(1, round(img.size[1] * scale)))
            img = img.resize(size, resample=0 if scale > 1 else 1)  # NEAREST up, LANCZOS down
        buf = io.BytesIO()
        img.save(buf, format="PNG")
        out[int(s)] = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
    return out


def render_page(dataset: str, round_: int, classes: tuple[str, ...], items: list[dict]) -> str:
    """The labelling page (jinja2, autoescaped): ``items`` are dicts with sample_id, source and
    image (a data URI)."""
    import jinja2

    env = jinja2.Environment(loader=jinja2.PackageLoader("zoorank.labels", "templates"),
                             autoescape=True, undefined=jinja2.StrictUndefined)
    keys = [{"key": SHORTCUTS[i] if i < len(SHORTCUTS) else "", "name": c}
            for i, c in enumerate(classes)]
    return env.get_template("ask.html.j2").render(
        dataset=dataset, round=round_, classes=keys, items=items,
        config={"classes": list(classes), "round": round_, "keys": [k["key"] for k in keys]})


def label_studio_tasks(pool: Pool, round_: int, sample_ids: list[int],
                       images: dict[int, str]) -> list[dict]:
    """Label Studio import tasks: ``data.image`` (the inlined thumbnail) and ``data.sample_id``
    (kept by every export), ``meta`` with the dataset, round and the image's source."""
    where = dict(zip(pool.sample_id.tolist(), pool.source))
    return [{"data": {"image": images[s], "sample_id": int(s)},
             "meta": {"dataset": pool.dataset, "round": round_, "sample_id": int(s),
                      "source": where[s]}} for s in sample_ids]


def label_studio_config(classes: tuple[str, ...]) -> str:
    """The Label Studio labelling config of a round (an image and one choice per class)."""
    from xml.sax.saxutils import quoteattr

    choices = "\n".join(f"    <Choice value={quoteattr(c)}/>" for c in classes)
    return ('<View>\n  <Image name="image" value="$image"/>\n'
            '  <Choices name="label" toName="image" choice="single" showInline="true">\n'
            f"{choices}\n  </Choices>\n</View>\n")


def run_ask(context: RunContext | RunConfig, budget: int, round_: int | None = None,
            dataset: str | None = None, max_labels: int | None = None,
            sampler: str | None = None, out=print) -> AskRound:
    """Choose ``budget`` images of ``dataset`` and write round ``round_`` (default: the next);
    ``sampler``: how the images are chosen (None: the zoo kind's default,
    :func:`zoorank.labels.stopping.resolve_sampler`)."""
    if budget <= 0:
        raise InputError(f"--budget: {budget} (give the number of images to ask for, ≥ 1)")
    context = RunContext.of(context)
    config = context.config
    store = context.store
    pool = with_head_predictions(config, load_pool(config, dataset, context=context), context)
    sampler = resolve_sampler(pool, sampler)
    round_ = next_round(store) if round_ is None else int(round_)
    if round_ < 1:
        raise InputError(f"--round: {round_} (rounds count from 1)")
    before = asked_before(store, pool.dataset, skip_round=round_)
    excluded = np.zeros(len(pool.sample_id), dtype=bool)
    excluded[pool.labelled] = True
    excluded |= np.isin(pool.sample_id, np.fromiter(before, dtype=np.int64, count=len(before)))
    ev = evidence(pool, config.seed)
    if pool.predictions is not None:
        picks = head_batch(pool, excluded, budget, config.seed + round_, sampler)
        method = HEAD_SAMPLERS[sampler]
    else:
        picks = embedding_batch(pool, ev, excluded, budget, config.seed + round_, sampler)
        method = {"committee": "query-by-committee", "uncertainty": "uncertainty sampling",
                  "random": "random"}[sampler]
        if ev.predictions is None and sampler != "random":
            method = f"cold start (k-means), then {method}"
    ids = [int(pool.sample_id[p]) for p in picks]
    if not ids:
        raise InputError(f"dataset {pool.dataset!r}: every sample is labelled or was asked "
                         "before; nothing left to ask")
    images = thumbnails(pool, ids)
    where = dict(zip(pool.sample_id.tolist(), pool.source))
    rel = ask_dir(round_)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["sample_id", "label", "source"])
    for s in ids:
        writer.writerow([s, "", where[s]])
    items = [{"sample_id": s, "source": where[s], "image": images[s]} for s in ids]
    store.write_text(f"{rel}/to_label.csv", buf.getvalue())
    store.write_text(f"{rel}/index.html", render_page(pool.dataset, round_, pool.classes, items))
    store.write_text(f"{rel}/label_studio.json",
                     json.dumps(label_studio_tasks(pool, round_, ids, images), indent=1))
    store.write_text(f"{rel}/label_studio.xml", label_studio_config(pool.classes))
    excluded[picks] = True
    rule = stopping_rule(pool, ev, round_size=budget, seed=config.seed, max_labels=max_labels,
                         excluded=excluded, sampler=sampler)
    # the pick as the console prints it (the labels before this round)
    store.write_json(f"{rel}/round.json", {"dataset": pool.dataset, "round": round_,
                                           "budget": budget, "asked": ids,
                                           "labels_before": int(ev.n_labels),
                                           "method": method, "pick": few_label_pick(rule)})
    paths = {name: store.uri_of(rel, name) for name in
             ("to_label.csv", "index.html", "label_studio.json", "label_studio.xml")}
    for line in console_lines(rule):
        out(line)
    if rule["stop"]:
        out("ask: the stopping rule says stop; this round is optional")
    out(f"ask: round {round_}: {len(ids)} image(s) of {pool.dataset} to label ({method})")
    for name, path in paths.items():
        out(f"  {name:<18} {path}")
    out(f"  then: zoorank label {config_shown()} {paths['to_label.csv']} (filled in, or the page's "
        "saved CSV, or a Label Studio export)")
    return AskRound(round_, pool.dataset, ids, paths, rule)
