from layergeom.tokenwise.pipeline import write_summary
from layergeom.workflow import job

sm = snakemake  # noqa: F821
s = sm.params.settings
with job(sm, seed=s["seed"], threads=sm.threads):
    write_summary(
        list(sm.input.tables),
        sm.input.kl,
        s["tokenwise"],
        seed=s["seed"],
        out_summary=sm.output.summary,
        out_anchors=sm.output.anchors,
        out_pooled=sm.output.pooled,
    )
