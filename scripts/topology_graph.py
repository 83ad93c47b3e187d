import torch  # noqa: F401  (imported before job(): set_determinism then pins its threads)

from layergeom.topology.pipeline import write_graphs
from layergeom.workflow import job, job_device

sm = snakemake  # noqa: F821
s = sm.params.settings
with job(sm, seed=s["seed"], threads=sm.threads):
    write_graphs(
        sm.input.activations,
        sm.params.boundaries,
        s["topology"],
        seed=s["seed"],
        nodes=sm.output.nodes,
        edges=sm.output.edges,
        sweeps=sm.output.sweep,
        device=job_device(sm),
        block=getattr(sm.params, "block", None),  # a fanned-out checkpoint's block (spectra.boundaries_per_job)
    )
