"""The model jobs' requests: activations, the Jacobians, the tokenwise fits and KL, training.

Memory: the arrays a job holds at its peak, counted from the code in bytes (a comment per term), plus the
interpreter with torch and transformers (TORCH_BASE_MB), × SAFETY, at least MIN_MB. Pages of the files a job
keeps memory-mapped count in full while they are mapped: the weights (``models.load_model`` maps the safetensors,
and every forward pass reads every page) and a boundary's activation store while it is read. Snakemake's SLURM
executor passes mem_mb as ``sbatch --mem``; SLURM enforces it with the job's memory cgroup, which charges the
page cache of the files the job reads and writes as well as its own memory (clean pages are reclaimed under the
limit, but pages the job reads on every pass then come back from disk each time), and some clusters kill a job
whose sampled RSS exceeds its request (``JobAcctGatherParams=OverMemoryKill``), an RSS that counts mapped file
pages. So a request covers the job's RSS, mapped pages included. The activation dump releases the pages it has
written (``store.dump_activations``), so its store counts one batch, not the whole file.
Runtime: the job's work (counted from the same shapes) × seconds per unit measured by
bench/resources_model_rates.py at small widths (bench/results/resources_model_rates.json: one thread on the shared
2-core development machine), × SAFETY, at least MIN_MINUTES; doubles on a retry like the rest.

The shapes come from the model's config.json where it is at hand (``model_dims``) and the weights' bytes from the
safetensors header once the checkpoint is materialised; a hub model before its download with only d_model (and
n_layers) known is sized with the upper bounds below.
"""

from __future__ import annotations

from .margins import MIN_MB, _mb

#: the interpreter with torch, transformers and numpy imported and a model's modules built (MB): ~450 MB measured
#: by the bench after the imports; the 600 covers a Snakemake script job's own objects and the allocator's arenas
TORCH_BASE_MB = 600
#: a block's weights when only d is known: 16·d² bounds attention (4·d²: q, k, v, o at full width) plus a gated MLP
#: of width 4·d (12·d²); the vocabulary: 262144 entries, untied (Gemma's; the largest of the supported families)
UNKNOWN_BLOCK_D2 = 16
UNKNOWN_VOCAB = 262144
#: ``tokenwise.neighbours.knn``: a distance block (queries × points) holds at most this many elements
KNN_ELEMENTS = 1 << 24
#: ``spectral.structured``: per-sample tensors of one chunk and a (G', d, m) batch of scaled weights (elements)
STRUCTURED_CHUNK_ELEMENTS = 1 << 24
STRUCTURED_PRODUCT_ELEMENTS = 1 << 26
#: model types whose MLP has two matrices (up, down) instead of three (gate, up, down)
UNGATED_TYPES = ("gpt2", "gpt_neox")


def _cfg_int(cfg: dict, *keys) -> int | None:
    return next((int(cfg[k]) for k in keys if cfg.get(k) is not None), None)


def model_dims(cfg: dict | None, d: int | None = None, n_layers: int | None = None) -> dict | None:
    """The shapes the model jobs' requests follow, from a config.json dict (the decoder's part of a multimodal
    wrapper): d, n_layers, d_ff (the MLP's inner width; Mamba's mixer width), vocab, heads, kv_heads, head_dim,
    gated (three MLP matrices), mamba, the weights of one block (``block_params``) and of the model (``params``,
    embeddings included, an untied head counted twice). Without a config (``estimated``: True) from d and n_layers
    alone: UNKNOWN_BLOCK_D2·d² per block, d_ff = 4·d, full-width heads of 128, UNKNOWN_VOCAB untied. None without d.
    """
    from ..modelinfo import _LAYER_KEYS, _WIDTH_KEYS, text_config

    text = text_config(cfg) if cfg else {}
    d = _cfg_int(text, *_WIDTH_KEYS) or (int(d) if d else None)
    if not d:
        return None
    L = _cfg_int(text, *_LAYER_KEYS) or int(n_layers or 1)
    if not text:
        heads = max(1, d // 128)
        return {"d": d, "n_layers": L, "d_ff": 4 * d, "vocab": UNKNOWN_VOCAB, "heads": heads, "kv_heads": heads,
                "head_dim": d // heads, "gated": True, "mamba": False, "estimated": True,
                "block_params": UNKNOWN_BLOCK_D2 * d * d, "params": L * UNKNOWN_BLOCK_D2 * d * d + 2 * UNKNOWN_VOCAB * d}  # fmt: skip
    mtype = str((cfg or {}).get("model_type") or text.get("model_type") or "")
    mamba = mtype.startswith("mamba") or "ssm_state_size" in text
    heads = _cfg_int(text, "num_attention_heads", "n_head") or max(1, d // 64)
    kv = _cfg_int(text, "num_key_value_heads") or heads
    hd = _cfg_int(text, "head_dim") or d // heads
    expand = _cfg_int(text, "expand") or 2
    d_ff = _cfg_int(text, "intermediate_size", "n_inner", "ffn_dim") or (expand * d if mamba else 4 * d)
    vocab = _cfg_int(text, "vocab_size") or UNKNOWN_VOCAB
    gated = mtype not in UNGATED_TYPES and not mamba
    tied = bool(text.get("tie_word_embeddings", (cfg or {}).get("tie_word_embeddings", False)))
    if mamba:  # in_proj d × 2·d_inner, out_proj d_inner × d (x_proj, dt_proj and the convolution are O(d_inner))
        block = 3 * d * d_ff
    else:  # q, o: d × heads·hd; k, v: d × kv_heads·hd; the MLP: (2 or 3) × d × d_ff
        block = d * hd * (2 * heads + 2 * kv) + (3 if gated else 2) * d * d_ff
    return {"d": d, "n_layers": L, "d_ff": d_ff, "vocab": vocab, "heads": heads, "kv_heads": kv, "head_dim": hd,
            "gated": gated, "mamba": mamba, "estimated": False, "block_params": block,
            "params": L * block + vocab * d * (1 if tied else 2)}  # fmt: skip


def _torch_mb(bytes_: float) -> int:
    return _mb(bytes_, TORCH_BASE_MB)


def store_names(n_boundaries_kept: int) -> int:
    """The store's files: the kept boundaries and ``final``."""
    return int(n_boundaries_kept) + 1


# -- activations (store.dump_activations) --
def activations_bytes(dims: dict, *, n_windows: int, window_tokens: int, batch_size: int, n_names: int,
                      model_bytes: int, store_bytes: int, weight_bytes: float) -> float:  # fmt: skip
    """Peak bytes of the activation dump besides the interpreter: the weights, one batch's forward pass with every
    captured boundary, its checks and the store rows it writes, and a snapshot's hashing of one file."""
    d, T, B = dims["d"], int(window_tokens), min(int(batch_size), int(n_windows))
    rows, N = B * T, int(n_windows) * T
    H, KV, hd = dims["heads"], dims["kv_heads"], dims["head_dim"]
    total = weight_bytes  # the safetensors, memory-mapped: each forward pass reads every page
    total += 8 * N  # the windows' token ids (int64)
    total += n_names * rows * d * model_bytes  # the hooks keep each kept boundary's (B, T, d) input (and final)
    total += rows * hd * (2 * H + 2 * KV) * model_bytes  # one block's q, k, v and attention output
    total += 2 * B * H * T * T * 4  # eager attention's scores and softmax (B, H, T, T), float32
    total += 4 * rows * dims["d_ff"] * model_bytes  # the MLP's gate, up, act(gate) and product (Mamba: its mixer)
    total += 2 * rows * dims["vocab"] * 4  # the batch's logits (B, T, V) and their float32 copy
    total += rows * d * (4 + 4 + 1 + 1 + store_bytes)  # per boundary: its float32 copy for the checks, the squared
    # norms' operand, two isfinite masks, the rows in the store's dtype
    total += n_names * rows * d * store_bytes + n_names * 2 * 4096  # the rows just written to each file (released
    # once written: one batch per file, and a page at each end)
    total += N * d * store_bytes  # a snapshot hashes the rows written since the last one, mapped: at most one file
    return total


def activations_mem_mb(dims: dict | None, **kw) -> int:
    if not dims:
        return MIN_MB
    return _torch_mb(activations_bytes(dims, **kw))


# -- the tokenwise fits (tokenwise.pipeline.fit_layer) --
def tokenwise_fit_bytes(
    d: int, *, n_tokens: int, n_pool: int, n_anchors: int, k: int, classes, store_bytes: int
) -> float:
    """Peak bytes of one layer's fits besides the interpreter, the largest of the job's phases."""
    d, N, n, k = int(d), int(n_tokens), int(n_pool), int(k)
    m = min(int(n_anchors), n)
    classes = set(classes)
    states = 2 * 4 * n * d  # H0, H1: the pool's rows of the two boundaries, float32 copies (kept to the end)
    read = N * d * store_bytes  # a boundary's store file, mapped while its rows are copied out
    c = min(m, max(1, KNN_ELEMENTS // max(n, 1)))  # kNN queries per distance block
    knn = 2 * 4 * c * n + 3 * 4 * c * 2 * (k + 1) * d  # the distance block and its top-k; the candidates' states,
    # their differences to the query and the squares (c, 2(k+1), d)
    neigh = 2 * 4 * m * k * d + 3 * 4 * m * d  # X, Y (m, k, d) and xa, ya, the radius (m, d)
    glob = 0.0
    if "global" in classes:  # fit_global: H0, H1 in float64 and H1 - H0 while H0ᵀ(H1 - H0) forms, then the solve
        glob = max(3 * 8 * n * d + 3 * 8 * d * d, 2 * 8 * n * d + 7 * 8 * d * d)  # gram, eye, λ·eye, their sum,
        # the Cholesky factor, the right side and the solution (d, d) float64
    gmap = 8 * d * d if "global" in classes else 0  # the global map A, kept for apply_global
    p2 = 2 * k  # localise: [X Y]ᵀ (m, d, 2k) in float64 and geqrf's reflectors; the float32 concatenation first
    local = (8 * m * d * p2 + max(4 * m * d * p2, 8 * m * d * p2)) if classes & {"lowrank", "orthogonal", "mlp"} else 0
    after = (8 * m * d * p2 + 8 * m * p2 * p2) if local else 0  # the reflectors and the coordinates R (m, 2k, 2k)
    # kept for the fits and the geometry; then the largest of: the diag fit's X·Y (m, k, d) float32, the global
    # map's SVDs (A - I, U, S, Vᵀ, LAPACK's workspace), a local fit's arrays in coordinates (fit_orthogonal's locals:
    # the SVD factors of YᵀX, the principal vectors, L, E and their temporaries, ~14 (m, 2k, k) float64, then the
    # singular vectors of L through its (2k, 2k) Gram matrix, 4 more (m, 2k, 2k); fit_mlp's are fewer)
    after += max(4 * m * k * d if "diag" in classes else 0, 5 * 8 * d * d if "global" in classes else 0,
                 11 * 8 * m * p2 * p2 if local else 0)  # fmt: skip
    patches = (
        len(classes) * m * d * (8 + 4)
    )  # every class's prediction t (m, d) float64 and the stacked float32 patches
    return states + max(read, knn, neigh + glob, neigh + gmap + local, neigh + gmap + after + patches)


def tokenwise_fit_mem_mb(d: int | None, **kw) -> int:
    if not d:
        return MIN_MB
    return _torch_mb(tokenwise_fit_bytes(int(d), **kw))


# -- the functional KL (tokenwise.pipeline.kl_checkpoint, tokenwise.kl.patched_kl) --
def tokenwise_kl_bytes(dims: dict, *, n_windows: int, window_tokens: int, n_anchors: int, n_classes: int,
                       batch_rows: int, model_bytes: int, weight_bytes: float) -> float:  # fmt: skip
    """Peak bytes of the KL job besides the interpreter: the weights, every layer's patched states, and one chunk of
    windows resumed together (their clean runs, stacked, and the patched rows' logits and KL). A chunk holds
    R = batch_rows rows of at least C (the classes) per window; a window whose anchors alone exceed R (more than
    R/C of them, 43 with the defaults) is not counted."""
    d, L, T, V = dims["d"], dims["n_layers"], int(window_tokens), dims["vocab"]
    H, KV, hd, b = dims["heads"], dims["kv_heads"], dims["head_dim"], model_bytes
    C = max(1, int(n_classes))
    m = min(int(n_anchors), int(n_windows) * (T - 1))
    R = max(int(batch_rows), C)  # the chunk's patched rows
    W = min(int(n_windows), R // C)  # its windows
    slots = min(W * R, (R + C) ** 2 // (4 * C))  # the query grid (windows × the most rows of one): at most (R+C)²/4C
    total = weight_bytes  # the safetensors, memory-mapped: the clean passes and the resumes read every page
    total += 3 * 8 * int(n_windows) * T  # the store's index (rows × 3, int64)
    total += L * C * m * d * 4  # every layer's patched states (classes, anchors, d) float32
    run = (L + 1) * T * d * b + L * 2 * KV * T * hd * b  # a window's clean run: the block inputs and final state,
    # every layer's keys and values
    total += 2 * W * run  # the chunk's clean runs and their stacked copy
    clean = T * V * 4 + 2 * H * T * T * 4 + 4 * T * dims["d_ff"] * b  # a clean pass: its logits (T, V), attention
    # scores and softmax, the MLP's intermediates (freed after each window)
    resume = 2 * W * (KV + H) * (T + R) * hd * b + slots * H * (T + R) * 4  # a resumed block: the prefix's keys and
    # values with the queries' appended, repeated onto the query heads; the attention weights over the grid
    resume += slots * (3 * d + 4 * dims["d_ff"]) * b  # the grid's states, norms and MLP intermediates
    kl = R * V * (4 + 8) + (R // C) * V * (4 + 8)  # the patched logits (R, V) and their differences D in float64; the
    # chunk's clean logits at the anchors and their softmax in float64
    return total + max(clean, resume + kl)


def tokenwise_kl_mem_mb(dims: dict | None, **kw) -> int:
    if not dims:
        return MIN_MB
    return _torch_mb(tokenwise_kl_bytes(dims, **kw))


# -- the mean Jacobians (spectral.jobs.jacobians.boundary_jacobians: one boundary at a time) --
def jacobian_sample_count(n_windows: int, window_tokens: int, spectra: dict) -> tuple[int, int]:
    """(samples N, sample windows) of the Jacobian job (``jacobians.select_samples``): the first
    min(n_windows, spectra.n_samples) windows' non-BOS tokens (``samples: all``), their last tokens (``last``), or
    a seeded subset of that many (an integer); ``samples: null`` is ``all`` isolated, ``last`` in context."""
    T = int(window_tokens)
    wins = min(int(n_windows), int(spectra["n_samples"]))
    samples = spectra.get("samples")
    if samples is None:
        samples = "last" if spectra.get("context") == "in_context" else "all"
    if samples == "last":
        return wins, wins
    allrows = wins * (T - 1)
    return (allrows if samples == "all" else min(int(samples), allrows)), wins


def jacobian_route(dims: dict, kind: str, spectra: dict) -> str:
    """``structured`` or ``autodiff`` for a boundary kind (``jacobians.choose_method``): autodiff for Mamba's blocks,
    with ``method: autodiff``, and for attention in context."""
    if dims.get("mamba") or spectra.get("method") == "autodiff":
        return "autodiff"
    if spectra.get("context") == "in_context" and kind not in ("mlp", "pli"):
        return "autodiff"
    return "structured"


def jacobian_inner_width(dims: dict, kind: str) -> int:
    """The widest inner dimension m of a boundary's sublayer: the MLP's d_ff, attention's heads·head_dim, Mamba's
    mixer width, the per-layer input's width (Gemma-4: at most d)."""
    if kind == "attn":
        return dims["heads"] * dims["head_dim"]
    if kind == "pli":
        return dims["d"]
    return dims["d_ff"]


def jacobian_terms(dims: dict, kind: str) -> int:
    """Core terms L diag(g) R of a boundary's sublayer: a gated MLP 2, an ungated one and attention 1."""
    return 2 if kind == "mlp" and dims["gated"] else 1


def jacobian_boundary_bytes(dims: dict, kind: str, *, n_samples: int, n_tokens: int, window_tokens: int, n_groups: int,
                            spectra: dict, store_bytes: int, model_bytes: int) -> float:  # fmt: skip
    """Peak bytes of one boundary of the Jacobian job besides the interpreter and the weights."""
    d, N, G = dims["d"], int(n_samples), max(1, int(n_groups))
    m = jacobian_inner_width(dims, kind)
    b = 8 if spectra.get("dtype") == "float64" else 4  # the per-sample work's dtype
    d2 = float(d) * d
    total = n_tokens * d * store_bytes  # the boundary's store file, mapped while the samples' rows are read
    total += N * d * (4 + (b if b != 4 else 0))  # the samples' states x (N, d) float32 (and in the work's dtype)
    if jacobian_route(dims, kind, spectra) == "autodiff":
        c = int(spectra.get("chunk_size") or 16)
        prefix = int(window_tokens) - 1 if spectra.get("context") == "in_context" else 0
        total += c * prefix * d * (4 + b)  # the chunk's prefixes (in context), read and in the work's dtype
        # the chunk's Jacobians (c, d, d), their float64 copy for the sums; vmapped jacrev's d cotangents through
        # the sublayer's widest activation, a few tensors of (c, d, m)
        total += c * d2 * (b + 8) + 4 * c * d * m * b
        return total + 2 * G * d2 * 8  # the group sums (G, d, d) float64 and their means
    terms = jacobian_terms(dims, kind)
    total += terms * m * d * b  # the core's right factors with the pre-norm's scale folded in, R·D_P (m, d)
    if kind == "attn":
        total += m * d * model_bytes  # the value weights repeated onto the query heads (heads·head_dim, d)
    c = min(N, max(1, STRUCTURED_CHUNK_ELEMENTS // (4 * m)))  # samples per chunk
    # per chunk (c, m): up, gate, the tangent of ones, act and act' from torch.func.jvp of the activation with its
    # two temporaries (SiLU: the sigmoid and its derivative's factor), the term's product; two float64 weights
    chunk = c * m * (8 * b + 2 * 8)
    product = min(G, max(1, STRUCTURED_PRODUCT_ELEMENTS // (d * m))) * (d * m * b + d2 * (b + 8))  # a batch of
    # scaled weights (G', d, m) and its product (G', d, d) with the float64 copy
    S = min(N, int(spectra.get("summary_samples") or 0))
    per = min(S, max(1, STRUCTURED_PRODUCT_ELEMENTS // (4 * d * d)))  # per-sample summaries formed together
    summaries = 3 * per * d2 * 8  # their sums (per, d, d) float64: the sum, its D_Q-scaled copy, the branches' total
    groups = G * d2 * 8  # the group sums (G, d, d) float64
    total += groups + max(
        chunk + 2 * d2 * 8,  # the low-rank terms' (d, d) float64 update per group
        product + d2 * (b + 8),  # the diagonal terms (attention: one L·R (d, d) shared by the groups)
        groups + d2 * 16,  # the sums scaled by D_Q (and their copy in the sum over branches); later the group means
        summaries + per * d * m * b,  # the summary samples' Jacobians, formed while the sums are kept
        G * d2 * 4,  # the group means written in float32
    )
    return total


def jacobians_bytes(dims: dict, kinds, *, weight_bytes: float, **kw) -> float:
    """Peak bytes of the Jacobian job besides the interpreter: the weights (memory-mapped; converted when
    spectra.dtype differs from the model's) and its largest boundary."""
    b_model, b_work = kw["model_bytes"], 8 if kw["spectra"].get("dtype") == "float64" else 4
    weights = weight_bytes * (1 + (b_work / b_model if b_work != b_model else 0))
    return weights + max(jacobian_boundary_bytes(dims, k, **kw) for k in set(kinds))


def jacobians_mem_mb(dims: dict | None, kinds, **kw) -> int:
    if not dims:
        return MIN_MB
    return _torch_mb(jacobians_bytes(dims, kinds, **kw))


# -- the work of each model job, in units whose seconds bench/resources_model_rates.py measures (its fit of seconds
# per unit is not used yet: the model jobs' runtimes are the profile's) --
def activations_work(dims: dict, *, n_windows: int, window_tokens: int, n_names: int, **_) -> dict:
    """The dump's work: every token through the blocks and the head (multiply-adds per token: the weights of the
    matrix products), eager attention (T keys per token and layer at heads·head_dim), and the rows checked and
    written per store file."""
    N, T, d, L = int(n_windows) * int(window_tokens), int(window_tokens), dims["d"], dims["n_layers"]
    return {
        "forward": float(N) * (L * dims["block_params"] + dims["vocab"] * d),
        "attention": float(N) * T * L * dims["heads"] * dims["head_dim"],
        "store": float(N) * d * int(n_names),
    }


def tokenwise_fit_work(d: int, *, n_pool: int, n_anchors: int, k: int, classes, **_) -> dict:
    """One layer's fits: the kNN distances (anchors × pool × d), the global map's Gram products (pool × d²) and
    its d³ factorisations and SVDs, the local QR and fits (anchors × d × (2k)²), and the per-anchor MLP training."""
    n, d, k = int(n_pool), int(d), int(k)
    m, classes = min(int(n_anchors), n), set(classes)
    glob = "global" in classes
    return {
        "knn": float(m) * n * d,
        "gram": float(n) * d * d if glob else 0.0,
        "cube": float(d) ** 3 if glob else 0.0,
        "local": float(m) * d * (2 * k) ** 2 if classes & {"lowrank", "orthogonal", "mlp"} else 0.0,
        "anchors": float(m) * k if "mlp" in classes else 0.0,
    }


def tokenwise_kl_work(dims: dict, *, n_windows: int, window_tokens: int, n_anchors: int, n_classes: int, **_) -> dict:
    """The KL's work: a clean pass over each window with an anchor (tokens × the blocks' and head's weights), each
    patched row (anchors × classes, per layer l) resumed through the blocks after l and the head, and its KL over
    the vocabulary."""
    T, L, d, V = int(window_tokens), dims["n_layers"], dims["d"], dims["vocab"]
    m = min(int(n_anchors), int(n_windows) * (T - 1))
    rows = float(m) * max(1, int(n_classes))
    return {
        "clean": float(min(m, int(n_windows))) * T * (L * dims["block_params"] + V * d),
        "resume": rows * (L * (L - 1) / 2 * dims["block_params"] + L * V * d),
        "kl": rows * L * V,
    }


def jacobians_work(dims: dict, kinds, *, n_samples: int, n_groups: int, spectra: dict, **_) -> dict:
    """The Jacobian job's work over its boundaries (``kinds``: one entry per boundary): structured, each sample
    through the sublayer and its norms' low-rank terms (N·d·m per core term and one more) and the low-rank terms'
    (d, d) sums (N·d²), the group means' and summary samples' d×m×d products (attention's one product is shared by
    the groups); by autodiff, d cotangents through the sublayer per sample (N·d²·m)."""
    N, G, d = int(n_samples), max(1, int(n_groups)), dims["d"]
    S = int(spectra.get("summary_samples") or 0)
    per = max(1, STRUCTURED_PRODUCT_ELEMENTS // (4 * d * d))
    work = {"sample": 0.0, "lowrank": 0.0, "product": 0.0, "autodiff": 0.0}
    for kind in kinds:
        m, t = jacobian_inner_width(dims, kind), jacobian_terms(dims, kind)
        if jacobian_route(dims, kind, spectra) == "autodiff":
            work["autodiff"] += float(N) * d * d * m
            continue
        work["sample"] += float(N) * d * m * (t + 1)
        work["lowrank"] += float(N) * d * d
        products = (1 + -(-S // per)) if kind == "attn" else t * (G + S)
        work["product"] += float(products) * d * d * m
    return work
