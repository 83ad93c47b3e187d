"""layergeom: geometry and dynamics of layer updates in language models (Papers A and B)."""

__version__ = "0.1.0"

from .runtime import log_script_failures as _log_script_failures  # noqa: E402

# in a Snakemake script: from its first `layergeom` import on, a failure ends in the job's own log file
_log_script_failures()
