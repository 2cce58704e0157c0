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

The modules: :mod:`~zoorank.init.scan` (the walk), :mod:`~zoorank.init.checkpoint_entries`,
:mod:`~zoorank.init.datasets`, :mod:`~zoorank.init.timm_names` (the entries) and
:mod:`~zoorank.init.render` (the file's text); here, :func:`build_config` and
:func:`init_command`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from zoorank.errors import ConfigError, InputError
from zoorank.init.checkpoint_entries import checkpoint_groups, describe_checkpoints
from zoorank.init.datasets import _dataset_name, find_datasets
from zoorank.init.render import _relative, render
from zoorank.init.runs import RunGroup, run_groups, run_notes
from zoorank.init.scan import CHECKPOINT_SUFFIXES, SMALL_IMAGE, Found, scan
from zoorank.init.timm_names import timm_entries


def build_config(folder: Path | None, timm_names: list[str], data: list[Path],
                 arch: str | None, base: Path, config_name: str = "zoorank.yaml") -> str:
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
            runs = run_groups(group, folder) if entry.pattern.count("**") == 0 else [
                RunGroup(entry.pattern, group, None, None)]
            for run in runs:
                model: dict[str, Any] = {"source": "timm",
                                         "name": entry.name or "TODO-architecture",
                                         "checkpoint": _relative(folder / run.pattern, base)}
                if entry.state_dict_prefix:
                    model["state_dict_prefix"] = entry.state_dict_prefix
                model.update({k: v for k, v in (("group", run.group), ("family", run.family))
                              if v})
                model["#"] = [*run_notes(run, group, folder), *entry.notes[1:]]
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
    return render(folder, datasets, models, base, input_size, config_name)


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
    text = build_config(folder, list(args.timm), [Path(p) for p in args.data], args.arch, base,
                        str(args.output))
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
