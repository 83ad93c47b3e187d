from layergeom.spectral.jobs.schur import gather_schur
from layergeom.workflow import job

sm = snakemake  # noqa: F821
cfg = sm.params.settings["spectra"]
with job(sm):
    gather_schur(
        list(sm.input.preps),
        list(sm.input.chains),
        sm.params.boundaries,
        sm.output[0],
        sm.input.cumulative,
        alphas=cfg["alphas"],
        orders=cfg["schur_orders"],
        order_alphas=cfg["schur_order_alphas"],
        segments=sm.params.segments,  # each chain's segment jobs (spectra.chain_segments, by its cost)
        inputs=[*sm.input.npy, *sm.input.groups, *sm.input.meta],
    )
