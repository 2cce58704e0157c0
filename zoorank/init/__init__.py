"""``zoorank init``: a commented starting config from what a folder holds, and timm names.

What it looks for under FOLDER (hidden folders and stores skipped):

* **checkpoints** (``.safetensors``, ``.ckpt``, ``.pt``, ``.pth``, ``.bin``): files alike (same
  suffix and depth, the same tensors in the first and last) become one glob entry
  (``runs/*/last.ckpt``: one model per file). :func:`zoorank.zoo.inspect.inspect_checkpoint` (what
  ``zoorank inspect`` prints) gives the layout: where the state dict is, and the
  ``state_dict_prefix`` preset that selects the backbone (Lightning, solo-learn, DINO, MoCo). The
  timm architecture is ``--arch``, else a timm name found in the checkpoint's metadata
  (``hyper_parameters``) or its path (``runs/resnet18-lr0.1/...``), kept only once the first
  checkpoint loads into it strictly (:func:`zoorank.zoo.build.load_model`, as EMBED loads it);
  else the entry says TODO.
* transformers model folders (``config.json`` beside the weights): a ``transformers`` entry
  each;
* ``zoo.yaml`` files that ``zoorank tune`` exports: a ``from_tune`` entry each (their checkpoints
  are not globbed again);
* **datasets**: image folders (class sub-folders: ``labels_from_folders``), Parquet files with
  an image column, ``.npz`` files with an ``images`` array. Images of at most 64 px set the
  models' ``input_size``.

``--timm NAMES`` adds timm entries (pretrained where the local Hugging Face cache has the
weights). The file is written only if it validates (:func:`zoorank.config.loading.load_config`);
paths in it are relative to its own folder.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from zoorank.config import NAME_PATTERN
from zoorank.config.suggest import did_you_mean
from zoorank.errors import ConfigError, InputError

CHECKPOINT_SUFFIXES = (".safetensors", ".ckpt", ".pt", ".pth", ".bin")
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm",
                  ".pgm", ".pbm")
#: files looked at, at most (a folder with more is a data lake, not a zoo).
MAX_FILES = 200_000
#: images up to this side set the models' ``input_size`` (CIFAR, digits): no upsampling.
SMALL_IMAGE = 64
#: metadata keys whose string values name an architecture more often than others.
_ARCH_KEYS = ("arch", "architecture", "backbone", "model", "model_name", "encoder", "net", "name")


@dataclass
class Found:
    """What a folder holds, as paths."""

    checkpoints: list[Path] = field(default_factory=list)
    image_dirs: dict[Path, int] = field(default_factory=dict)  # folder → images directly in it
    parquet: list[Path] = field(default_factory=list)
    npz: list[Path] = field(default_factory=list)
    zoo_files: list[Path] = field(default_factory=list)
    transformers_dirs: list[Path] = field(default_factory=list)


def _skipped(name: str) -> bool:
    return name.startswith(".") or name in ("__pycache__", "node_modules") or \
        name.startswith("zoorank-store")


def scan(folder: Path) -> Found:
    """Walk ``folder`` once (sorted, hidden folders and stores skipped, at most
    :data:`MAX_FILES` files)."""
    found = Found()
    seen = 0
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not _skipped(d))
        here = Path(root)
        images = 0
        for name in sorted(files):
            seen += 1
            if seen > MAX_FILES:
                raise InputError(f"{folder}: more than {MAX_FILES} files; point zoorank init at "
                                 "the folder of the checkpoints or of the images")
            suffix = Path(name).suffix.lower()
            if name.startswith("."):
                continue
            if name == "zoo.yaml":
                found.zoo_files.append(here / name)
            elif suffix in CHECKPOINT_SUFFIXES:
                found.checkpoints.append(here / name)
            elif suffix in IMAGE_SUFFIXES:
                images += 1
            elif suffix == ".parquet":
                found.parquet.append(here / name)
            elif suffix == ".npz":
                found.npz.append(here / name)
        if images:
            found.image_dirs[here] = images
        if "config.json" in files and {"model.safetensors", "pytorch_model.bin"} & set(files):
            found.transformers_dirs.append(here)
    owned = [z.parent for z in found.zoo_files] + found.transformers_dirs
    found.checkpoints = [c for c in found.checkpoints
                         if not any(c.is_relative_to(t) for t in owned)]
    return found


# ----------------------------------------------------------------------------- checkpoints


def glob_for(files: list[Path], root: Path) -> str:
    """A glob (relative to ``root``) that names ``files``: path parts they share kept, the others
    ``*`` (a file name ``*<suffix>``); files at different depths: ``<shared>/**/*<suffix>``."""
    parts = [f.relative_to(root).parts for f in files]
    suffix = files[0].suffix
    if len({len(p) for p in parts}) > 1:
        shared = []
        for column in zip(*parts):
            if len(set(column)) > 1:
                break
            shared.append(column[0])
        shared = shared[: min(len(p) for p in parts) - 1]
        return "/".join([*shared, "**", f"*{suffix}"])
    out = []
    for i, column in enumerate(zip(*parts)):
        last = i == len(parts[0]) - 1
        out.append(column[0] if len(set(column)) == 1 else (f"*{suffix}" if last else "*"))
    return "/".join(out)


def _signature(path: Path) -> Any:
    """What tells checkpoints of one kind apart: their tensors' names and shapes."""
    from zoorank.zoo.inspect import inspect_checkpoint

    try:
        report = inspect_checkpoint(str(path))
    except Exception as err:  # noqa: BLE001 - an unreadable file is a kind of its own
        return ("unreadable", type(err).__name__)
    return (report.loader, report.state_dict_entry, tuple(report.tensors))


def checkpoint_groups(files: list[Path], root: Path) -> list[list[Path]]:
    """Files alike: one suffix and depth; a group whose first and last files hold different
    tensors is split by its first folder below ``root`` (once)."""
    by_kind: dict[tuple[str, int], list[Path]] = {}
    for f in files:
        by_kind.setdefault((f.suffix.lower(), len(f.relative_to(root).parts)), []).append(f)
    groups = []
    for members in by_kind.values():
        if len(members) > 1 and _signature(members[0]) != _signature(members[-1]):
            split: dict[str, list[Path]] = {}
            for f in members:
                split.setdefault(f.relative_to(root).parts[0], []).append(f)
            groups.extend(split.values())
        else:
            groups.append(members)
    return groups


def _strings(obj: Any, depth: int = 0) -> list[tuple[str, str]]:
    """(key, string value) pairs in a checkpoint's metadata (tensors and deep nests skipped)."""
    if depth > 5:
        return []
    out: list[tuple[str, str]] = []
    if isinstance(obj, dict):
        items = list(obj.items())
    elif isinstance(obj, (list, tuple)):
        items = [("", v) for v in obj[:50]]
    elif hasattr(obj, "__dict__") and not hasattr(obj, "shape"):  # a Namespace's placeholder
        items = list(vars(obj).items())
    else:
        return []
    for key, value in items:
        if isinstance(value, str):
            out.append((str(key), value))
        elif not hasattr(value, "shape"):
            out.extend(_strings(value, depth + 1))
    return out


def _timm_name(text: str) -> str | None:
    import timm

    text = text.strip()
    if not text or len(text) > 80 or "/" in text.removeprefix("hf-hub:timm/"):
        return None
    return text if timm.is_model(text) else None


def arch_candidates(path: Path, root: Path) -> list[str]:
    """timm architectures a checkpoint names: in its metadata (``arch``/``backbone``/... keys
    first), then in its path's parts (``resnet18-lr0.1`` → ``resnet18``), longest first."""
    from zoorank.zoo.checkpoints import load_checkpoint_object

    found: list[str] = []
    try:
        obj = load_checkpoint_object(str(path))
    except Exception:  # noqa: BLE001 - no metadata to read: the path may still tell
        obj = None
    pairs = _strings(obj) if obj is not None and not str(path).endswith(".safetensors") else []
    pairs.sort(key=lambda kv: kv[0].lower() not in _ARCH_KEYS)
    for _, value in pairs:
        name = _timm_name(value)
        if name:
            found.append(name)
    for part in reversed(path.relative_to(root).with_suffix("").parts):
        tokens = re.split(r"[-_.@=+ ]", part)
        spans = sorted(((i, j) for i in range(len(tokens)) for j in range(i + 1, len(tokens) + 1)),
                       key=lambda s: s[0] - s[1])
        for i, j in spans:
            for sep in ("_", "-", "."):
                name = _timm_name(sep.join(tokens[i:j]))
                if name:
                    found.append(name)
    return list(dict.fromkeys(found))


def _loads(spec: dict[str, Any]) -> str | None:
    """None when ``spec`` (one model entry) builds and loads as EMBED would, else why not."""
    from zoorank.config.loading import parse_config
    from zoorank.zoo.build import load_model
    from zoorank.zoo.resolve import resolve_models

    try:
        config = parse_config({"datasets": [{"name": "probe", "source": "sklearn_digits"}],
                               "models": [spec]}, "<zoorank init>")
        (model,) = resolve_models(config)
        load_model(model)
    except Exception as err:  # noqa: BLE001 - the reason is reported in the written file
        return str(err).splitlines()[0] if str(err) else type(err).__name__
    return None


@dataclass
class CheckpointEntry:
    """One glob entry and what was found out about it."""

    pattern: str  # relative to the folder scanned
    files: list[Path]
    notes: list[str]
    name: str | None
    state_dict_prefix: str | None
    classes: int | None


def _preset(report: Any) -> str | None:
    """The ``state_dict_prefix`` preset a checkpoint calls for, or None for a plain state dict."""
    presets = report.presets
    if not presets:
        return None
    keys = {k for k, _ in report.entries}
    for preset in ("dino-teacher", "moco"):
        if preset in presets:
            return preset
    if "lightning" in presets and ({"pytorch-lightning_version", "hyper_parameters"} & keys
                                   or "solo-learn" not in presets):
        return "lightning"
    return next(iter(presets))


def describe_checkpoints(files: list[Path], root: Path, arch: str | None) -> CheckpointEntry:
    """The entry of one group: its glob, layout (preset), head and architecture."""
    from zoorank.zoo.inspect import inspect_checkpoint

    first = files[0]
    pattern = glob_for(files, root) if len(files) > 1 else first.relative_to(root).as_posix()
    shown = first.relative_to(root).as_posix()
    notes = [f"{len(files)} checkpoint file(s) like {shown}"]
    try:
        report = inspect_checkpoint(str(first))
    except Exception as err:  # noqa: BLE001
        notes.append(f"TODO: {shown} cannot be read ({str(err).splitlines()[0]})")
        return CheckpointEntry(pattern, files, notes, arch, None, None)
    if report.loader == "refused":
        notes.append(f"TODO: {shown} needs the global {report.refused} to load (code from the "
                     "file); trust_checkpoint: true only for files you trust")
        return CheckpointEntry(pattern, files, notes, arch, None, None)
    preset = _preset(report)
    entry = report.state_dict_entry
    where = ("the top level" if entry == "" else repr(entry) if entry else "the whole checkpoint")
    notes.append(f"layout ({report.loader}): state dict at {where}"
                 + (f"; backbone keys under {report.presets[preset]!r} (preset {preset})"
                    if preset else ""))
    classes = report.classifier[1] if report.classifier else None
    if classes:
        notes.append(f"classifier head: {report.classifier[0]} → {classes} classes (kept)")
    candidates = [arch] if arch else arch_candidates(first, root)
    name, why = None, []
    for candidate in candidates[:5]:
        spec = {"source": "timm", "name": candidate, "checkpoint": str(first)}
        if preset:
            spec["state_dict_prefix"] = preset
        problem = _loads(spec)
        if problem is None:
            name = candidate
            break
        why.append(f"{candidate}: {problem}")
    if name:
        notes.append(f"architecture {name}: {shown} loads into it strictly"
                     + (" (--arch)" if arch else ""))
    elif candidates:
        notes.append("TODO: the architecture: tried " + "; ".join(why)[:300])
    else:
        notes.append("TODO: the architecture (not named in the checkpoint or its path): a timm "
                     "name, or source: python with your model's factory; `zoorank inspect "
                     f"{shown}` lists its tensors")
    return CheckpointEntry(pattern, files, notes, name, preset, classes)


# ----------------------------------------------------------------------------- datasets


def _dataset_name(path: Path, taken: set[str]) -> str:
    stem = path.stem if path.suffix else path.name
    base = re.sub(r"[^A-Za-z0-9_.\-]", "-", stem).strip("-._") or "data"
    if not re.match(NAME_PATTERN, base):
        base = f"d{base}"
    if base.casefold() == "prior":
        base = "prior-data"
    name, n = base, 2
    while name.casefold() in taken:
        name, n = f"{base}-{n}", n + 1
    taken.add(name.casefold())
    return name


def _image_size(data: bytes | str | Path) -> int | None:
    """The longer side of one image (None when it cannot be read)."""
    import io

    from PIL import Image

    try:
        with Image.open(io.BytesIO(data) if isinstance(data, bytes) else data) as img:
            return max(img.size)
    except Exception:  # noqa: BLE001 - the size is a hint only
        return None


def _parquet_columns(path: Path) -> tuple[str | None, str | None, int, int | None]:
    """(image column, label column, rows, the first image's size) of a Parquet file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(path)
    schema = pf.schema_arrow
    images = [f.name for f in schema if pa.types.is_binary(f.type) or pa.types.is_large_binary(f.type)
              or (pa.types.is_struct(f.type) and f.type.get_field_index("bytes") >= 0)]
    images.sort(key=lambda n: n.lower() not in ("image", "img", "images"))
    labels = [f.name for f in schema if f.name.lower() in ("label", "labels", "target", "class",
                                                          "fine_label", "y")
              and (pa.types.is_integer(f.type) or pa.types.is_string(f.type)
                   or pa.types.is_large_string(f.type))]
    size = None
    if images and pf.metadata.num_rows:
        value = pf.read_row_group(0, columns=[images[0]]).column(0)[0].as_py()
        value = value.get("bytes") if isinstance(value, dict) else value
        size = _image_size(value) if isinstance(value, bytes) else None
    return (images[0] if images else None, labels[0] if labels else None,
            pf.metadata.num_rows, size)


def find_datasets(found: Found, extra: list[Path]) -> tuple[list[dict[str, Any]], list[int]]:
    """Dataset entries (path as a :class:`Path`, comments under ``#``) and image sizes seen."""
    entries: list[dict[str, Any]] = []
    sizes: list[int] = []
    taken: set[str] = set()
    image_dirs = dict(found.image_dirs)
    for path in extra:
        if path.is_dir():
            sub = scan(path).image_dirs
            if not sub:
                raise InputError(f"--data {path}: no images under it")
            image_dirs.update(sub)
        elif path.suffix.lower() == ".parquet":
            found.parquet.append(path)
        elif path.suffix.lower() == ".npz":
            found.npz.append(path)
        else:
            raise InputError(f"--data {path}: not an image folder, a Parquet or an .npz file")
    # a folder whose sub-folders hold the images (and it none itself): one dataset, labels
    # from the sub-folders' names
    parents = Counter(d.parent for d in image_dirs)
    for parent, n in sorted(parents.items()):
        if n >= 2 and parent not in image_dirs:
            classes = sorted(d for d in image_dirs if d.parent == parent)
            total = sum(image_dirs.pop(d) for d in classes)
            first = next(p for p in sorted(classes[0].iterdir()) if p.suffix.lower() in IMAGE_SUFFIXES)
            sizes += [s for s in [_image_size(first)] if s]
            entries.append({"name": _dataset_name(parent, taken), "source": "image_folder",
                            "path": parent, "labels_from_folders": True,
                            "#": f"{total} images in {len(classes)} class folders (labels from "
                                 "their names)"})
    for folder, n in sorted(image_dirs.items()):
        first = next(p for p in sorted(folder.iterdir()) if p.suffix.lower() in IMAGE_SUFFIXES)
        sizes += [s for s in [_image_size(first)] if s]
        entries.append({"name": _dataset_name(folder, taken), "source": "image_folder",
                        "path": folder, "#": f"an image folder: {n} images, no labels"})
    for path in sorted(set(found.parquet)):
        try:
            image, label, rows, size = _parquet_columns(path)
        except Exception as err:  # noqa: BLE001 - a Parquet file zoorank cannot read is no dataset
            print(f"zoorank init: {path}: skipped ({str(err).splitlines()[0]})", file=sys.stderr)
            continue
        if image is None:
            continue  # a table without images (results, embeddings)
        sizes += [size] if size else []
        entry = {"name": _dataset_name(path, taken), "source": "parquet", "path": path,
                 "image_column": image, "#": f"Parquet: {rows} rows"
                 + (f", labels in {label!r}" if label else ", no label column")}
        if label:
            entry["label_column"] = label
        entries.append(entry)
    for path in sorted(set(found.npz)):
        import numpy as np

        try:
            with np.load(path, allow_pickle=False) as npz:
                if "images" not in npz.files:
                    continue
                shape = npz["images"].shape
                labelled = "labels" in npz.files
        except Exception:  # noqa: BLE001
            continue
        if len(shape) >= 3:
            sizes.append(int(max(shape[1], shape[2])))
        entries.append({"name": _dataset_name(path, taken), "source": "numpy", "path": path,
                        "#": f".npz: {shape[0]} images" + (" with labels" if labelled else "")})
    return entries, sizes


# ----------------------------------------------------------------------------- timm names


def timm_entries(names: list[str]) -> list[dict[str, Any]]:
    """One entry per timm name (a ConfigError with a did-you-mean for an unknown one);
    ``pretrained: true`` where the local cache has its weights."""
    import timm

    entries = []
    for name in names:
        if not timm.is_model(name):
            raise ConfigError(f"--timm {name}: not a timm architecture"
                              f"{did_you_mean(name, timm.list_models())}")
        spec = {"source": "timm", "name": name, "pretrained": True}
        cached = _loads_resolves(spec)
        entry: dict[str, Any] = {"source": "timm", "name": name, "pretrained": cached}
        entry["#"] = ("timm, the hub weights from the local Hugging Face cache" if cached else
                      "timm, a seeded random init: TODO pretrained: true once the weights are "
                      f"in the local Hugging Face cache (hf download timm/{name})")
        entries.append(entry)
    return entries


def _loads_resolves(spec: dict[str, Any]) -> bool:
    from zoorank.config.loading import parse_config
    from zoorank.zoo.resolve import resolve_models

    try:
        resolve_models(parse_config({"datasets": [{"name": "probe", "source": "sklearn_digits"}],
                                     "models": [spec]}))
    except (ConfigError, InputError, OSError):
        return False
    return True


# ----------------------------------------------------------------------------- the file


def _scalar(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=True, width=1000).strip().removesuffix(
        "\n...").removesuffix("...").strip()


def _relative(path: Path, base: Path) -> str:
    """``path`` as written in a config in ``base``: ``./...`` below it, else absolute."""
    rel = os.path.relpath(path.absolute(), base.absolute())
    if rel == ".":
        return "."
    return str(path.absolute()) if rel.startswith("..") else f"./{rel}"


def _entry_lines(entry: dict[str, Any], base: Path) -> list[str]:
    lines = []
    note = entry.pop("#", None)
    for n in ([note] if isinstance(note, str) else note or []):
        lines.append(f"  # {n}")
    first = True
    for key, value in entry.items():
        if isinstance(value, Path):
            value = _relative(value, base)
        lines.append(f"  {'- ' if first else '  '}{key}: {_scalar(value)}")
        first = False
    return lines


def render(folder: Path | None, datasets: list[dict[str, Any]], models: list[dict[str, Any]],
           base: Path, input_size: int | None) -> str:
    """The config's text: a header, then ``store``, ``datasets``, ``models``, ``views`` and
    ``metrics`` with comments."""
    stamp = _dt.datetime.now().replace(microsecond=0).isoformat(sep=" ")
    source = ("" if folder is None else " from this folder" if _relative(folder, base) == "."
              else f" from {_relative(folder, base)}")
    lines = [
        f"# zoorank run config, written by `zoorank init`{source} ({stamp}).",
        "# Relative paths are taken from this file's folder. Every field: `zoorank config "
        "schema`,",
        "# or the configuration reference of the docs. Check the lines marked TODO, then:",
        "#   zoorank zoo THIS.yaml     # what the models resolve to, before anything runs",
        "#   zoorank run THIS.yaml     # embed, score, rank, report",
        "store: ./zoorank-store       # a folder (beside this file) or s3:// / gs://",
        "seed: 0",
        "datasets:",
    ]
    for entry in datasets:
        lines += _entry_lines(entry, base)
        lines.append("    # limit: 5000            # a seeded subset of this many images")
    lines.append("models:")
    for entry in models:
        if input_size and entry.get("source") == "timm" and "input_size" not in entry:
            entry["input_size"] = input_size
        lines += _entry_lines(entry, base)
    if input_size:
        lines.append(f"# input_size {input_size}: the images are at most {input_size} px, so "
                     "the models see them as they are")
    lines += [
        "views:",
        "  - name: clean",
        "  # - {name: simclr, samples: 500, per_sample: 10}   # augmented views: LiDAR and the "
        "augmented metrics",
        "# metrics: [rankme, ...]      # default: every label-free metric",
        "# oracle: {knn: true}        # with labelled data: check the ranking against labels",
    ]
    return "\n".join(lines) + "\n"


def build_config(folder: Path | None, timm_names: list[str], data: list[Path],
                 arch: str | None, base: Path) -> str:
    """The text of a config for what ``folder`` holds, ``timm_names`` and ``data``."""
    found = scan(folder) if folder is not None else Found()
    datasets, sizes = find_datasets(found, data)
    models: list[dict[str, Any]] = []
    for zoo in sorted(found.zoo_files):
        models.append({"from_tune": zoo.parent, "#": "the checkpoints of a zoorank tune search"})
    taken: set[str] = set()
    for directory in sorted(found.transformers_dirs):
        models.append({"id": _dataset_name(directory, taken), "source": "transformers",
                       "name": directory, "#": "a transformers model folder (config.json)"})
    if folder is not None:
        for group in checkpoint_groups(sorted(found.checkpoints), folder):
            entry = describe_checkpoints(group, folder, arch)
            model: dict[str, Any] = {"source": "timm",
                                     "name": entry.name or "TODO-architecture",
                                     "checkpoint": _relative(folder / entry.pattern, base)}
            if entry.state_dict_prefix:
                model["state_dict_prefix"] = entry.state_dict_prefix
            model["#"] = entry.notes
            models.append(model)
    models += timm_entries(timm_names)
    if not models:
        where = f"under {folder} " if folder is not None else ""
        raise InputError(f"zoorank init: no checkpoint ({', '.join(CHECKPOINT_SUFFIXES)}) "
                         f"{where}and no --timm names: nothing to rank")
    if not datasets:
        datasets = [{"name": "images", "source": "image_folder", "path": base / "images",
                     "#": "TODO: your images (no image folder, Parquet or .npz file was found)"}]
    small = [s for s in sizes if s]
    input_size = max(small) if small and max(small) <= SMALL_IMAGE else None
    return render(folder, datasets, models, base, input_size)


def init_command(args: Any) -> int:
    """``zoorank init [FOLDER] [--timm NAMES] [--data PATH] [--arch NAME] [-o FILE] [--force]``."""
    import tempfile

    from zoorank.config.loading import load_config

    out = Path(args.output)
    if out.exists() and not args.force:
        raise ConfigError(f"{out} exists; give --force to overwrite it, or -o another file")
    folder = Path(args.folder) if args.folder else None
    if folder is not None and not folder.is_dir():
        raise InputError(f"{folder}: not a folder")
    if folder is None and not args.timm:
        raise ConfigError("zoorank init: give a FOLDER of checkpoints, or --timm NAMES")
    base = out.parent if str(out.parent) else Path(".")
    text = build_config(folder, list(args.timm), [Path(p) for p in args.data], args.arch, base)
    base.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=base, suffix=".yaml", delete=False) as tmp:
        tmp.write(text)
    try:
        load_config(tmp.name)  # what is written validates (else a bug: nothing is written)
        os.replace(tmp.name, out)
    finally:
        if os.path.exists(tmp.name):
            os.unlink(tmp.name)
    todo = sum("TODO" in line for line in text.splitlines()[5:])  # the header names it too
    print(f"zoorank init: wrote {out}" + (f" ({todo} line(s) marked TODO to check)" if todo
                                          else "") + f"; next: zoorank zoo {out}")
    return 0
