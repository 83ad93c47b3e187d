"""The documentation that ships with the repository says what the code does."""

from __future__ import annotations

from conftest import ROOT

from layergeom.configdoc import reference_markdown


def test_config_reference_is_current():
    """config/README.md is rendered from the schemas (python tools/config_reference.py): every key, no stale one."""
    assert (ROOT / "config" / "README.md").read_text() == reference_markdown(), "run python tools/config_reference.py"
