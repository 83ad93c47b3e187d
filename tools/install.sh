#!/usr/bin/env bash
# Create .venv and install exactly the hash-locked environment into it (pip --require-hashes): requirements/lock.txt,
# one build of torch 2.13.0, then layergeom itself (editable, without dependencies); once per change of the locks.
# LAYERGEOM_TORCH picks the torch build (README, Quick start; docs/cluster.md, "Locked environments"):
#   cpu   (default) the CPU build: download.pytorch.org's wheel on Linux x86-64 (requirements/torch-cpu.txt),
#         PyPI's on macOS and Windows (requirements/torch-pypi.txt, a CPU build there)
#   cuda  PyPI's build (requirements/torch-pypi.txt): on Linux the CUDA build with its nvidia-* wheels
# The venv ends with the locked distributions and nothing else (others are uninstalled); tools/lock.py checks it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=${PYTHON:-python3}
TORCH=${LAYERGEOM_TORCH:-cpu}
case "$TORCH" in
  cpu | cuda) ;;
  *) echo "install.sh: LAYERGEOM_TORCH must be cpu or cuda, not '$TORCH' (README, Quick start)" >&2; exit 2 ;;
esac
stamp=.venv/.layergeom-installed
want="$(cat pyproject.toml requirements/*.txt | sha256sum | cut -c1-16) $TORCH"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
rm -f "$stamp"
[ -x .venv/bin/python ] || "$PY" -m venv .venv
pip=(.venv/bin/python -m pip --disable-pip-version-check)
# the locked pip and setuptools first: with --no-build-isolation they build any sdist of the lock (connection-pool
# has no wheel), where build isolation would fetch a setuptools that no hash checks
boot=$(mktemp)
trap 'rm -f "$boot"' EXIT
.venv/bin/python tools/lock.py pins pip setuptools > "$boot"
"${pip[@]}" install --quiet --require-hashes --no-deps -r "$boot"
# --no-deps: the locks are complete (accelerate needs torch, which comes next); pip check below confirms it
"${pip[@]}" install --quiet --require-hashes --no-deps --no-build-isolation -r requirements/lock.txt
targs=$(.venv/bin/python tools/lock.py torch-args "$TORCH")  # -r FILE [--extra-index-url URL]
# shellcheck disable=SC2086  # words
"${pip[@]}" install --quiet --require-hashes --no-deps $targs
"${pip[@]}" install --quiet --no-deps --no-build-isolation --no-index -e .
extra=$(.venv/bin/python tools/lock.py extras "$TORCH")  # distribution names, one a line
if [ -n "$extra" ]; then
  echo "install.sh: uninstalling what the lock does not list:" $extra
  # shellcheck disable=SC2086  # words
  "${pip[@]}" uninstall --quiet --yes $extra
fi
"${pip[@]}" check
.venv/bin/python tools/lock.py check-installed "$TORCH"
echo "$want" > "$stamp"
