#!/usr/bin/env bash
# The main job on a fresh clone: install, then run the whole workflow on the default config
# (the embedded SmolLM2-135M-Instruct and its random-init null model). Extra arguments go to snakemake.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash tools/install.sh
exec .venv/bin/snakemake --cores all "$@"
