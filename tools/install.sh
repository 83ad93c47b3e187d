#!/usr/bin/env bash
# Create .venv and install layergeom with the workflow and test extras, once per pyproject.toml change.
# torch is pinned by version; on Linux x86-64 PyPI serves the multi-GB CUDA build of it. For a CPU-only install
# set LAYERGEOM_TORCH="torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" (or .../cu126 for CUDA 12.6).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=${PYTHON:-python3}
TORCH=${LAYERGEOM_TORCH:-torch==2.13.0}
stamp=.venv/.layergeom-installed
want="$(sha256sum pyproject.toml | cut -c1-16) $TORCH"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
# shellcheck disable=SC2086
.venv/bin/python -m pip install --quiet --disable-pip-version-check $TORCH
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[workflow,test]'
echo "$want" > "$stamp"
