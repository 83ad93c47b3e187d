"""`snakemake --report` carries the manifests and the headline tables, not only the figures: their outputs are
marked for the report, each with a caption file that exists (read from Snakemake's own parse of the workflow)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import ROOT, require_dag_marker

HEADLINE = {"manifest.json": "Provenance", "spectra.tsv": "Tables", "cumulative.tsv": "Tables",
            "schur.tsv": "Tables", "tokenwise.tsv": "Tables", "coupling.tsv": "Tables"}  # fmt: skip


def reported_outputs() -> dict[str, tuple[str, Path]]:
    """Every output marked report(...): its pattern -> (category, caption path)."""
    require_dag_marker("parses the workflow with Snakemake")
    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings, StorageSettings

    out = {}
    with SnakemakeApi(OutputSettings(quiet=True)) as api:
        wf = api.workflow(
            resource_settings=ResourceSettings(),
            config_settings=ConfigSettings(configfiles=[ROOT / "config" / "test.yaml"]),
            storage_settings=StorageSettings(),
            snakefile=ROOT / "Snakefile",
        )._workflow
        for r in wf.rules:
            for f in r.output:
                rep = f.flags.get("report")
                if rep:
                    caption = (
                        Path(rep.caption) if Path(rep.caption).is_absolute() else Path(r.snakefile).parent / rep.caption
                    )
                    out[re.sub(r"\{(\w+),[^}]*\}", r"{\1}", str(f))] = (rep.category, caption)  # no constraints
    return out


@pytest.mark.dag
def test_the_report_carries_manifests_and_headline_tables():
    reported = reported_outputs()
    for name, category in HEADLINE.items():
        pattern = f"results/{{model}}/{{checkpoint}}/{name}"
        assert pattern in reported, f"{pattern} is not in the report"
        cat, caption = reported[pattern]
        assert cat == category and caption.is_file() and caption.read_text().strip(), (pattern, cat, caption)
