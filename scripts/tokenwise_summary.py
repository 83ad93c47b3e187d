from layergeom.tokenwise.pipeline import run_summarise
from layergeom.workflow import job

sm = snakemake  # noqa: F821
with job(sm, seed=sm.params.seed, threads=sm.threads):
    run_summarise(
        list(sm.input.tables),
        sm.input.kl,
        sm.params.tokenwise,
        seed=sm.params.seed,
        out_summary=sm.output.summary,
        out_anchors=sm.output.anchors,
        out_pooled=sm.output.pooled,
    )
