from layergeom.plots.tokenwise import draw_figures
from layergeom.workflow import job

sm = snakemake  # noqa: F821
with job(sm):
    draw_figures(
        summaries=dict(zip(sm.params.runs, sm.input.summaries)),
        anchors=dict(zip(sm.params.runs, sm.input.anchors)),
        pooled=dict(zip(sm.params.runs, sm.input.pooled)),
        labels=sm.params.labels,
        proj_k={m: s["tokenwise"]["proj_k"] for m, s in sm.params.settings.items()},
        outputs=dict(sm.output.items()),
    )
