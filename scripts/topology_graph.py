from layergeom.topology.pipeline import write_graphs
from layergeom.workflow import job, job_device

sm = snakemake  # noqa: F821
s = sm.params.settings
with job(sm, seed=s["seed"], threads=sm.threads, uses_torch=True):  # torch seeded, its threads pinned
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
