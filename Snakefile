# layergeom: the geometry and dynamics of layer updates inside language models.
# Paper A (tokenwise decomposition) and Paper B (residual-stream dynamics), end to end.
from snakemake.utils import min_version

min_version("9.0")


# --configfile replaces the default config instead of merging into it (models would add up)
if not config.get("models"):

    configfile: f"{workflow.basedir}/config/config.yaml"


report: "report/workflow.rst"


include: "rules/common.smk"


rule all:
    default_target: True
    input:
        get_final_output,


include: "rules/sources.smk"
include: "rules/tokenwise.smk"
include: "rules/spectra.smk"
include: "rules/topology.smk"
include: "rules/train.smk"
include: "rules/claims.smk"
