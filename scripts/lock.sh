#!/usr/bin/env bash
# Refresh requirements.lock: every package `scripts/install.sh` installs, pinned, for the CPU install
# on the project's machines (Linux x86_64, Python 3.11). torch and torchvision are resolved at the
# versions install.sh pins (torch's CPU wheel from PIP_FIND_LINKS, so no CUDA package enters the
# lock) and left out of it: install.sh installs them first, as before. The ranges of pyproject.toml
# stay for users who install zoorank into their own environment.
# Usage: scripts/lock.sh   (needs uv: `pip install uv`; `make lock` runs it)
set -euo pipefail
cd "$(dirname "$0")/.."
uv="${UV:-$(command -v uv || echo .venv/bin/uv)}"
links=()
for dir in ${PIP_FIND_LINKS:-}; do links+=(--find-links "$dir"); done
"$uv" pip compile pyproject.toml --extra dev --python-version 3.11 \
  --python-platform x86_64-manylinux_2_28 "${links[@]}" \
  --override scripts/lock-overrides.txt --no-emit-package torch --no-emit-package torchvision \
  --custom-compile-command "make lock" --upgrade --quiet -o requirements.lock
echo "requirements.lock: $(grep -c '^[a-z0-9]' requirements.lock) packages pinned"
