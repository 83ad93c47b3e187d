import json
import sys

sys.path.insert(0, f"{snakemake.scriptdir}/../src")  # noqa: F821
from layergeom.manifest import warn_identical
from layergeom.runtime import atomic_path
from layergeom.workflow import job

sm = snakemake  # noqa: F821
with job(sm):
    records = [json.loads(open(p).read()) for p in sm.input]
    warnings = warn_identical(records)
    cols = ["model", "checkpoint", "source", "revision", "weights_sha256"]
    with atomic_path(sm.output[0]) as tmp:
        with open(tmp, "w") as f:
            f.write("\t".join([*cols, "identical_to"]) + "\n")
            first = {}
            for r in records:
                same = first.setdefault(r["weights_sha256"], r["checkpoint"])
                row = [str(r.get(c)) for c in cols] + [same if same != r["checkpoint"] else ""]
                f.write("\t".join(row) + "\n")
