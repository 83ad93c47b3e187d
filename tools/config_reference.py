"""Write config/README.md, the configuration reference, from the JSON schemas (tests check it is current)."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
from layergeom.configdoc import reference_markdown  # noqa: E402

(ROOT / "config" / "README.md").write_text(reference_markdown())
print("wrote config/README.md")
