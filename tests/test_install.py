"""The CPU torchvision import fix: timm imports, and the hook is inert where ops exist."""

from __future__ import annotations

import subprocess
import sys


def test_timm_and_torchvision_import_and_build_a_model():
    code = (
        "import torch, torchvision, timm\n"
        "m = timm.create_model('resnet18', pretrained=False, num_classes=0).eval()\n"
        "print(tuple(m(torch.zeros(1, 3, 32, 32)).shape))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "(1, 512)"


def test_fix_defines_schemas_only_when_the_extension_is_missing():
    code = (
        "import torch, torchvision\n"
        "from torchvision.extension import _has_ops\n"
        "torch._C._dispatch_find_schema_or_throw('torchvision::nms', '')\n"
        "print(_has_ops())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    # Either torchvision's own extension defines nms (GPU/normal installs) or our hook did.
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() in ("True", "False")


def test_the_lock_pins_every_dependency_of_pyproject():
    """requirements.lock (what install.sh installs) pins each dependency and dev tool that
    pyproject.toml names, at a version its range allows; torch and torchvision are pinned by
    install.sh itself. Fails when a dependency was added without ``make lock``."""
    import re
    from pathlib import Path

    import tomllib
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    root = Path(__file__).resolve().parents[1]
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    pins = {canonicalize_name(m.group(1)): m.group(2) for m in re.finditer(
        r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==(\S+)", (root / "requirements.lock")
        .read_text(), re.MULTILINE)}
    wanted = [Requirement(r) for r in [*project["dependencies"],
                                       *project["optional-dependencies"]["dev"]]]
    for req in wanted:
        name = canonicalize_name(req.name)
        if name in ("torch", "torchvision"):
            assert name not in pins
            continue
        assert name in pins, f"{req.name} is not in requirements.lock: run `make lock`"
        assert req.specifier.contains(pins[name], prereleases=True), (req, pins[name])
    assert len(pins) > len(wanted)  # their dependencies are pinned too
