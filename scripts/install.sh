#!/usr/bin/env bash
# Create .venv (if missing) and install zoorank with its test tools, CPU torch pinned first, then
# every other package at the version requirements.lock pins (refresh it with `make lock`).
# Usage: scripts/install.sh [EXTRAS | WHEEL]   (default extras: dev; the lock covers dev)
#   WHEEL (a path ending in .whl): install that built wheel instead of the clone (no extras),
#   e.g. into a fresh environment outside the clone: VENV=/tmp/zoorank-wheel-venv scripts/install.sh
#   dist/zoorank-*.whl (scripts/check_wheel.sh)
set -euo pipefail
arg="${1:-dev}"
case "$arg" in *.whl) arg="$(cd "$(dirname "$arg")" && pwd)/$(basename "$arg")" ;; esac
cd "$(dirname "$0")/.."
venv="${VENV:-.venv}"
python="${PYTHON:-python3}"
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check)
# the clone: the lock's pins as requirements (the dev tools too); a wheel: as constraints (only
# what the wheel needs, at the lock's versions)
case "$arg" in
  *.whl) target=(-c requirements.lock "$arg") ;;
  *) target=(-r requirements.lock -e ".[${arg}]") ;;
esac
# torch first and pinned: any unpinned torch/timm/torchvision requirement would otherwise fetch a
# newer torch plus several GB of CUDA packages.
"${pip[@]}" "torch==2.13.0"
"${pip[@]}" --no-deps "torchvision==0.28.0"
# one resolver pass: the package itself and every pin of the lock (an extra outside the lock, e.g.
# gpu, resolves freely beside them)
"${pip[@]}" "${target[@]}" "torch==2.13.0" "torchvision==0.28.0"
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
cp scripts/torchvision_cpu_fix.py "$site/zoorank_torchvision_cpu_fix.py"
echo "import zoorank_torchvision_cpu_fix" > "$site/zoorank_torchvision_cpu_fix.pth"
"$venv/bin/python" -c "import timm, torchvision, ray, faiss; print('zoorank install ok: torch', __import__('torch').__version__, 'timm', timm.__version__, 'ray', ray.__version__)"
