"""What every estimate of the spectral, topology and model jobs shares: the safety factor, the interpreter's
baseline and the floors a request never goes below, and the flat requests of the figure and gather jobs.

Memory: the arrays a job holds at its peak, counted from the code, plus a baseline of the interpreter, times a
safety factor, at least a floor. Runtime: the job's measured seconds (:mod:`.rates`), times the safety factor, at
least a floor. Both double on a retry (``attempt``, rules/common.smk).
"""

from __future__ import annotations

#: every estimate below is multiplied by this (allocator slack, BLAS/LAPACK workspaces not counted term by term)
SAFETY = 1.25
#: the interpreter with numpy, scipy, pandas and the layergeom modules the job imports (MB; the bench measures
#: ~200 MB after the imports, and a Snakemake script job adds its own objects)
BASE_MB = 400
#: what a spectral/topology job asks at least (MB) and at least how long (minutes); UNKNOWN_MINUTES when d is
#: not known yet (a dry run of a hub model whose config.json is neither downloaded nor cached)
MIN_MB = 2000
MIN_MINUTES = 10
UNKNOWN_MINUTES = 60
#: the figure and trend jobs: small tables and one matplotlib figure
FIGURE_MB = 2000
FIGURE_MINUTES = 15
#: the gather of a fanned-out spectra table (spectra.boundaries_per_job): it unpickles its parts' rows and
#: eigenvalue frames (about 50·d bytes per boundary pickled, a few times that in memory: 13 MB pickled at
#: d = 4096 and 64 boundaries) and writes two TSVs
GATHER_MB = MIN_MB
GATHER_MINUTES = MIN_MINUTES


def _mb(bytes_: float, base_mb: float = BASE_MB) -> int:
    return int(max(MIN_MB, -(-(SAFETY * (bytes_ / 1e6 + base_mb)) // 1)))


def _minutes(seconds: float) -> int:
    return int(max(MIN_MINUTES, -(-(SAFETY * seconds / 60.0) // 1)))
