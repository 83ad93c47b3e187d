import sys

sys.path.insert(0, f"{snakemake.scriptdir}/../src")  # noqa: F821
from layergeom.plots.topology import plot_significant_counts, save
from layergeom.topology.communities import read_tsv, write_tsv
from layergeom.topology.coupling import significant_counts
from layergeom.workflow import job

sm = snakemake  # noqa: F821
with job(sm):
    counts = significant_counts({tuple(k): read_tsv(p) for k, p in zip(sm.params.runs, sm.input)})
    write_tsv(counts, sm.output.table)
    save(plot_significant_counts(counts), sm.output.png, sm.output.pdf)
