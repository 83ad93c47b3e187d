#!/usr/bin/env bash
# Create .venv and install layergeom with the workflow and test extras, once per pyproject.toml change.
# torch is pinned to the CPU wheel (a bare `torch` would pull a multi-GB CUDA build); on a GPU machine,
# set LAYERGEOM_TORCH="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu126" or similar.
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
