#!/usr/bin/env bash
# The tests on a fresh clone: install, lint the code and the workflow (ruff, snakefmt, snakemake --lint), run the test suite
# (which includes the whole DAG on config/test.yaml). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash tools/install.sh
.venv/bin/ruff check src tests scripts bench tools
.venv/bin/snakefmt --check Snakefile rules/
.venv/bin/snakemake --lint
.venv/bin/python -m pytest "$@"
