"""Helpers for the EMBED tests: python-factory models, a malicious pickle, the tiny real zoo.

``tests/`` is on ``sys.path`` under pytest (rootdir conftest), and Ray workers inherit the driver's
``sys.path``, so factories here are ``embed_worker:<name>``; subprocesses get ``PYTHONPATH=tests``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch
from torch import nn
from zoo_factories import small_cnn  # noqa: F401  (served as ``embed_worker:small_cnn``)

#: every test model shares this geometry, so one (dataset, geometry) pipeline runs them all.
GEOMETRY = {"input_size": 32, "interpolation": "bilinear", "crop_pct": 1.0}


class NaNHead(nn.Module):
    """A conv net whose features are NaN for every input (a diverged checkpoint)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x).mean(dim=(2, 3)) * float("nan")


def nan_net() -> nn.Module:
    return NaNHead()


class CreatesFile:
    """A pickle whose loading would create ``marker`` (``open(marker, "w")``)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def build_zoo(directory: Path) -> dict[str, dict]:
    """Checkpoints of a tiny real zoo in ``directory``; returns model specs (config entries) by id.

    ``r18-st`` and ``r18-pt`` hold the same seeded resnet18 weights (safetensors and torch.save), so
    their embeddings must agree; ``cnn`` is a python factory; the others must fail.
    """
    import timm
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(1234)
    r18 = timm.create_model("resnet18", pretrained=False, num_classes=0)
    r18.eval()
    with torch.no_grad():  # non-trivial BN statistics, as a trained checkpoint has
        for m in r18.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
    state = {k: v.contiguous() for k, v in r18.state_dict().items()}
    save_file(state, str(directory / "r18.safetensors"))
    torch.save(state, directory / "r18.pt")
    (directory / "corrupt.safetensors").write_bytes(b"\x00\x01not a safetensors file" * 64)
    save_file(small_cnn().state_dict(), str(directory / "wrong_keys.safetensors"))
    torch.save({"state_dict": CreatesFile(directory / "pwned")}, directory / "malicious.pt")
    timm_spec = {"source": "timm", "name": "resnet18", **GEOMETRY}
    return {
        "r18-st": {"id": "r18-st", **timm_spec, "checkpoint": str(directory / "r18.safetensors")},
        "r18-pt": {"id": "r18-pt", **timm_spec, "checkpoint": str(directory / "r18.pt")},
        "cnn": {"id": "cnn", "source": "python", "name": "embed_worker:small_cnn", **GEOMETRY},
        "corrupt": {"id": "corrupt", **timm_spec,
                    "checkpoint": str(directory / "corrupt.safetensors")},
        "wrong-keys": {"id": "wrong-keys", **timm_spec,
                       "checkpoint": str(directory / "wrong_keys.safetensors")},
        "malicious": {"id": "malicious", **timm_spec, "checkpoint": str(directory / "malicious.pt")},
        "nan": {"id": "nan", "source": "python", "name": "embed_worker:nan_net", **GEOMETRY},
    }


def photo_folder(shared_data: Path, directory: Path, n: int, corrupt: bool = True) -> Path:
    """``n`` real photos of varied sizes from imagenet_sample (one of them grayscale), plus one
    corrupt JPEG (sorted last)."""
    from PIL import Image

    directory.mkdir(parents=True, exist_ok=True)
    photos = sorted((shared_data / "imagenet_sample").glob("*.JPEG"))
    gray = next(p for p in photos if Image.open(p).mode == "L")
    for p in [gray, *[q for q in photos[:: max(1, len(photos) // n)] if q != gray][: n - 1]]:
        shutil.copy(p, directory / p.name)
    if corrupt:
        data = photos[0].read_bytes()
        # a valid JPEG header followed by garbage: Pillow opens it and fails while decoding
        (directory / "zz_corrupt.JPEG").write_bytes(data[:200] + b"\xff\xd9" + b"\x00" * 50)
    return directory
