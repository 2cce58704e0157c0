"""The CPU torchvision import fix: timm imports, and the hook is inert where ops exist."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


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
    """The hook defined the schemas exactly when torchvision's own extension failed to load."""
    code = (
        "import sys, torch, torchvision\n"
        "from torchvision.extension import _has_ops\n"
        "torch._C._dispatch_find_schema_or_throw('torchvision::nms', '')\n"
        "hook = sys.modules.get('zoorank_torchvision_cpu_fix')\n"
        "print(_has_ops(), hook is not None and hasattr(hook, '_LIBRARY'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    has_ops, hook_defined = out.stdout.split()
    assert hook_defined == ("False" if has_ops == "True" else "True"), out.stdout


def test_fix_is_inert_where_the_extension_loaded():
    """With an extension that reports its ops (a GPU or normal install), the hook defines nothing:
    run in a fresh interpreter that never imports torchvision, so no schema exists beforehand."""
    code = (
        "import sys, types, torch\n"
        "sys.path.insert(0, 'scripts')\n"
        "import torchvision_cpu_fix as fix\n"
        "sys.modules['torchvision.extension'] = types.SimpleNamespace(_has_ops=lambda: True)\n"
        "fix._define_missing_schemas()\n"
        "try:\n"
        "    torch._C._dispatch_find_schema_or_throw('torchvision::nms', '')\n"
        "    found = True\n"
        "except RuntimeError:\n"
        "    found = False\n"
        "print(hasattr(fix, '_LIBRARY'), found)\n"
    )
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True,
                         timeout=180, cwd=root, env={**os.environ, "PYTHONPATH": _site_packages()})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False"], out.stdout


def _site_packages() -> str:
    """This interpreter's site-packages, for a child started with ``-S`` (no ``.pth`` hooks run)."""
    import sysconfig

    return sysconfig.get_paths()["purelib"]


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


def test_package_data_covers_every_file_the_package_reads_that_is_not_python():
    """Every file under zoorank/ that is not Python (templates, CSS, scripts, JSON records) matches
    a pattern of pyproject.toml's package-data for its package (the deepest folder with an
    ``__init__.py``), so a wheel ships it (scripts/check_wheel.sh checks the built wheel itself).
    """
    import fnmatch

    import tomllib

    root = Path(__file__).resolve().parents[1]
    data = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    files = [p for p in (root / "zoorank").rglob("*") if p.is_file() and p.suffix not in (".py", ".pyc")
             and "__pycache__" not in p.parts]
    assert any(p.name == "page.html.j2" for p in files)  # the report's templates are among them
    missing = []
    for path in files:
        package = path.parent
        while not (package / "__init__.py").is_file():
            package = package.parent
        name = ".".join(package.relative_to(root).parts)
        rel = path.relative_to(package).as_posix()
        patterns = [*data.get("*", []), *data.get(name, [])]
        # as setuptools globs: a "*" never crosses a "/"
        if not any(fnmatch.fnmatchcase(rel, pattern) and rel.count("/") == pattern.count("/")
                   for pattern in patterns):
            missing.append(str(path.relative_to(root)))
    assert not missing, f"not in pyproject.toml's package-data: {missing}"
