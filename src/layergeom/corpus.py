"""Corpus sources and seeded fixed-length token windows.

Sources: ``python-docs`` (offline, from ``pydoc_data.topics``, which ships with CPython),
``wikitext-2-raw-v1`` (through ``datasets``, online) and ``files`` (local text or parquet).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np

from .runtime import LayergeomError, atomic_path

log = logging.getLogger("layergeom")


def load_documents(ccfg: dict) -> list[str]:
    """The corpus as a list of non-empty documents (paragraphs or articles)."""
    source = ccfg["source"]
    if source == "python-docs":
        from pydoc_data.topics import topics

        docs = [topics[k] for k in sorted(topics)]
    elif source == "wikitext-2-raw-v1":
        try:
            import datasets

            ds = datasets.load_dataset("wikitext", "wikitext-2-raw-v1", split=ccfg.get("split", "test"))
        except Exception as err:  # ConnectionError, OSError, DatasetNotFoundError ... offline
            raise LayergeomError(
                f"could not load wikitext-2-raw-v1 through `datasets` ({type(err).__name__}). Offline, use "
                f"`corpus: {{source: python-docs}}` (built from CPython's pydoc_data) or `source: files`."
            ) from err
        docs = list(ds["text"])
    elif source == "files":
        docs = []
        for p in ccfg.get("paths", []):
            path = Path(p)
            if not path.exists():
                raise LayergeomError(f"corpus file '{p}' does not exist")
            docs += _parquet_texts(path) if path.suffix == ".parquet" else _text_paragraphs(path)
        if not docs:
            raise LayergeomError("corpus source 'files' needs at least one file in corpus.paths")
    else:
        raise LayergeomError(f"unknown corpus source '{source}'")
    docs = [d.strip() for d in docs if d and d.strip()]
    if not docs:
        raise LayergeomError(f"corpus '{source}' is empty")
    return docs


def _text_paragraphs(path: Path) -> list[str]:
    """Paragraphs (blocks separated by a blank line) of a UTF-8 text file."""
    try:
        return path.read_text(encoding="utf-8").split("\n\n")
    except UnicodeDecodeError as err:
        raise LayergeomError(
            f"corpus file '{path}' is not UTF-8 text (byte {err.object[err.start : err.start + 1]!r} at offset "
            f"{err.start}): convert it to UTF-8 (e.g. `iconv -f latin1 -t utf-8`) or remove it from corpus.paths"
        ) from None


def _parquet_texts(path: Path) -> list[str]:
    """The non-empty values of the string column ``text`` of a parquet file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as err:
        raise LayergeomError(f"corpus file '{path}' is not a readable parquet file ({err})") from None
    if "text" not in table.column_names:
        raise LayergeomError(f"corpus parquet '{path}' has no 'text' column (has {table.column_names})")
    kind = table.schema.field("text").type
    value = kind.value_type if pa.types.is_dictionary(kind) else kind
    if not (pa.types.is_string(value) or pa.types.is_large_string(value)):
        raise LayergeomError(
            f"corpus parquet '{path}': column 'text' holds {kind}, not strings; write the documents' text there"
        )
    return [t for t in table.column("text").to_pylist() if t]


def write_documents(docs: list[str], out: str | Path, meta: dict) -> None:
    with atomic_path(out) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(json.dumps({"meta": meta}) + "\n")
            for d in docs:
                f.write(json.dumps({"text": d}) + "\n")


def read_documents(path: str | Path) -> tuple[list[str], dict]:
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["text"] for line in lines[1:]], json.loads(lines[0])["meta"]


def train_bpe(docs: list[str], vocab_size: int, out_dir: str | Path) -> None:
    """A byte-level BPE trained on the corpus, saved in the Hugging Face layout (tests, tiny models)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(docs, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", bos_token="<|endoftext|>")
    with atomic_path(out_dir, is_dir=True) as tmp:
        fast.save_pretrained(tmp)


def adds_bos(tokenizer) -> bool:
    ids = tokenizer("a").input_ids
    return tokenizer.bos_token_id is not None and len(ids) > 0 and ids[0] == tokenizer.bos_token_id


def make_windows(docs: list[str], tokenizer, n_windows: int | None, window_tokens: int, seed: int) -> dict:
    """Cut the token stream of all documents into non-overlapping windows and draw n of them, seeded.

    Documents are joined with the EOS token (when the tokenizer has one); when the tokenizer adds a
    BOS token, each window starts with it, as the model saw in training. Position 0 of every window is
    the attention sink and is excluded from all analyses downstream. ``n_windows=None`` keeps them all.
    """
    bos = tokenizer.bos_token_id if adds_bos(tokenizer) else None
    sep = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    stream, doc_of = [], []
    for i, d in enumerate(docs):
        ids = tokenizer(d, add_special_tokens=False).input_ids + sep
        stream += ids
        doc_of += [i] * len(ids)
    body = window_tokens - (bos is not None)
    n_possible = len(stream) // body
    n_windows = n_possible if n_windows is None else n_windows
    if n_possible < n_windows or n_possible == 0:
        raise LayergeomError(
            f"the corpus has {len(stream)} tokens, enough for only {n_possible} windows of {window_tokens} "
            f"tokens, but corpus.n_windows is {n_windows}: lower n_windows or window_tokens, or use a larger corpus"
        )
    rng = np.random.default_rng(seed)
    starts = np.sort(rng.choice(n_possible, size=n_windows, replace=False)) * body
    stream = np.asarray(stream, dtype=np.int64)
    tokens = np.stack([stream[s : s + body] for s in starts])
    if bos is not None:
        tokens = np.concatenate([np.full((n_windows, 1), bos, dtype=np.int64), tokens], axis=1)
    return {
        "tokens": tokens,
        "offsets": starts.astype(np.int64),
        "doc_ids": np.asarray(doc_of, dtype=np.int64)[starts],
        "n_possible": n_possible,
        "n_stream_tokens": len(stream),
        "bos": -1 if bos is None else bos,
    }


def save_windows(w: dict, out: str | Path, meta: dict) -> None:
    with atomic_path(out) as tmp:
        with open(tmp, "wb") as f:
            np.savez(f, tokens=w["tokens"], offsets=w["offsets"], doc_ids=w["doc_ids"])
    meta = dict(meta, n_possible=int(w["n_possible"]), n_stream_tokens=int(w["n_stream_tokens"]), bos=int(w["bos"]))
    Path(out).with_suffix(".json").write_text(json.dumps(meta, indent=2) + "\n")


def load_windows(path: str | Path) -> np.ndarray:
    return np.load(path)["tokens"]
