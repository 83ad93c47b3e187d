import sys

sys.path.insert(0, f"{snakemake.scriptdir}/../src")  # noqa: F821
from layergeom.communities import store_topology, write_topology
from layergeom.workflow import job

sm = snakemake  # noqa: F821
with job(sm, seed=sm.params.run["seed"], threads=sm.threads):
    topo = store_topology(sm.input.activations, sm.wildcards.boundary, sm.params.topology, seed=sm.params.run["seed"])
    write_topology(topo, sm.output.nodes, sm.output.edges, sm.output.sweep)
