#!/usr/bin/env bash
# Build the wheel and sdist (python -m build), install the wheel into a fresh virtual environment
# outside the clone (scripts/install.sh: torch pinned first, the lock's versions as constraints,
# the CPU torchvision fix), then run `zoorank --version` and a tiny ranking there, from a folder
# outside the clone, so that nothing is read from the source tree. Any failure exits non-zero.
# Usage: scripts/check_wheel.sh [PYTHON]   (default: .venv/bin/python, which has `build`)
# Reuses the pip cache: the wheels install.sh downloaded for .venv are not fetched again.
set -euo pipefail
cd "$(dirname "$0")/.."
python="${1:-.venv/bin/python}"
dist=/tmp/zoorank-dist venv=/tmp/zoorank-wheel-venv work=/tmp/zoorank-wheel-run
rm -rf "$dist" "$venv" "$work"
# --no-isolation: build with the environment's own setuptools (the lock's), no download
"$python" -m build --no-isolation --outdir "$dist" . >/tmp/zoorank-build.log 2>&1 \
  || { cat /tmp/zoorank-build.log >&2; echo "check_wheel: python -m build failed" >&2; exit 1; }
wheel=$(ls "$dist"/zoorank-*.whl)
echo "check_wheel: built $(basename "$wheel") and the sdist in ${SECONDS}s"
ls "$dist"/zoorank-*.tar.gz >/dev/null
# every file of the package that is not Python is in the wheel (templates, JSON records)
"$python" - "$wheel" <<'PY'
import pathlib, subprocess, sys, zipfile
held = set(zipfile.ZipFile(sys.argv[1]).namelist())
listed = subprocess.run(["git", "ls-files", "zoorank"], capture_output=True, text=True)
files = listed.stdout.split() if listed.returncode == 0 else [  # not a git checkout: the tree
    p.as_posix() for p in pathlib.Path("zoorank").rglob("*")
    if p.is_file() and "__pycache__" not in p.parts]
missing = [f for f in files if not f.endswith(".py") and f not in held]
if missing:
    sys.exit(f"check_wheel: the wheel lacks {missing} (pyproject.toml's package-data)")
print(f"check_wheel: {sys.argv[1]} holds every package file ({len(files)})")
PY
VENV="$venv" PYTHON="${WHEEL_PYTHON:-python3}" bash scripts/install.sh "$wheel"
echo "check_wheel: installed into $venv at ${SECONDS}s"
mkdir -p "$work"
cd "$work"
"$venv/bin/zoorank" --version
# a tiny ranking: two small CNNs on 60 of scikit-learn's digits (built in, no download)
cat > tiny.yaml <<'YAML'
store: ./store
seed: 0
datasets: [{name: digits, source: sklearn_digits, limit: 60}]
models:
  - {id: cnn-w8, source: python, name: "zoorank.tune.models:small_cnn", model_kwargs: {width: 8}, input_size: 8}
  - {id: cnn-w16, source: python, name: "zoorank.tune.models:small_cnn", model_kwargs: {width: 16}, input_size: 8}
metrics: [rankme]
rank: {bootstrap: 10, resamples: 50}
YAML
env -u RAY_ADDRESS "$venv/bin/zoorank" run tiny.yaml --json > decision.json
"$venv/bin/python" - <<'PY'
import json, pathlib, zoorank
doc = json.loads(pathlib.Path("decision.json").read_text())
assert doc["pick"]["model_id"] in {"cnn-w8", "cnn-w16"}, doc["pick"]
assert pathlib.Path("store/report/index.html").is_file(), "no report (templates missing?)"
assert "site-packages" in zoorank.__file__, zoorank.__file__
print(f"check_wheel: zoorank {zoorank.__version__} from {zoorank.__file__} ranked the tiny zoo; "
      f"pick {doc['pick']['model_id']}")
PY
echo "check_wheel: done in ${SECONDS}s"
