"""Memory and runtime of the spectral table jobs (``spectra_table``, ``_cumulative``, ``_schur``'s single job and
prep, ``_convergence``) and of their fanned-out jobs (spectra.boundaries_per_job: a cumulative variant, a
convergence subset size). Memory: the arrays each job holds at its peak, counted from the code
(layergeom.spectral.*) in bytes per d² (d = d_model, one boundary at a time: the tables stream the boundaries in
depth order); runtime: the measured rates (:mod:`.rates`) times the boundaries; both with the margins of
:mod:`.margins`. The Schur chains' own jobs are in :mod:`.schur_jobs`."""

from __future__ import annotations

from ..spectral.settings import convergence_sizes
from .margins import MIN_MB, UNKNOWN_MINUTES, _mb, _minutes
from .rates import RATES, boundary_seconds
from .schur_jobs import _schur_grid_factor, schur_boundary_d2, schur_prep_seconds, schur_settings_chains


def spectra_bytes(stage: str, d: int, n_groups: int, spectra: dict, n_boundaries: int = 1) -> float:
    """Peak bytes a spectral table job holds besides the interpreter, counted from the code (d² terms).

    Common to all: the boundary's group means (G, d, d) float32, memory-mapped (their pages count in the RSS
    once read) and J̄_b in float64. ``spectra`` is the model's merged spectra section (every key set: the
    schema's defaults are filled in by validation).
    """
    s = spectra
    d2, G = float(d) * d, int(n_groups)
    blocks = s["ci_blocks"]
    K = G if blocks is None else min(int(blocks), G)
    common = 4 * G + 8  # group means (mapped) + J̄
    decomposition = 32 + 16  # left/right eigenvectors (complex128) + U, Vh of the SVD
    if stage == "spectra_table":
        # Δ_k float32; the linearised replicates (LinearSpectra: U, V float32, eigenvectors in float32 and
        # complex128 ≈ 28) and one replicate's temporaries (ΔV, J + Δ, Δx, eigvals(J+Δ); 60 counts the r'×r' block
        # the replicates no longer form, so it over-counts by up to 16);
        # LAPACK's eig holds real and complex vectors at once (+16)
        per_d2 = common + 4 * K + decomposition + 16 + 28 + 60
        return per_d2 * d2 + 100.0 * d * n_boundaries  # + the eigenvalue rows kept for eigenvalues.tsv
    if stage == "spectra_cumulative":
        # two variants' products C (float64) and K float32 tangents; a step: this and the previous boundary's
        # Δ (the generator's), the new tangents Δ·C + M·Ċ (three K-stacks while the old ones live), the SVD of
        # C with its gradient Γ (≈ 40) and I + J̄
        per_d2 = common + 2 * 4 * K + 2 * (8 + 4 * K) + 3 * 4 * K + 40 + 8
        return per_d2 * d2
    if stage == "spectra_schur":
        ch = schur_settings_chains(s)
        state = 16 * ch["complex"] + 8 * ch["complex_tangents"] + 16 * ch["orders"]
        return (4 * G + state + schur_boundary_d2(s, G)) * d2
    if stage == "spectra_schur_prep":
        # one boundary at a time, as the single job's (its arrays are streamed into the .npz), no chain
        return (4 * G + schur_boundary_d2(s, G)) * d2
    if stage == "spectra_convergence":
        # at S = G groups: the boundary's first max(S) group means (read once per boundary, copied) and the
        # subset's float64 mean, Δ (K = S) and the products' block deviations (4 blocks); every subset size's
        # chains, carried across the boundaries (the boundary-outer loop): two variants' products with ≤ 4
        # tangents each per size; an edge boundary's decomposition and linearised replicates (as
        # spectra_table), a chain step's temporaries
        n_sizes = max(1, convergence_counts(G, n_boundaries, s)[0])
        chains = n_sizes * 2 * (8 + 4 * 4)
        per_d2 = common + 4 * G + 4 * 4 + chains + decomposition + 16 + 28 + 60 + 3 * 4 * 4
        return per_d2 * d2
    raise ValueError(f"no memory model for '{stage}'")


def convergence_size_seconds(d: int, size: int, n_boundaries: int, n_edge: int) -> float:
    """Seconds of one subset size of the convergence table (S = `size` groups): every boundary's products, the
    `n_edge` edge boundaries' decompositions and replicates, the final boundary's erank SVDs. The rates are means
    over the bench's subset sizes; a size's share grows with S (RATES["convergence_groups"])."""
    op, oe, mean = RATES["convergence_groups"]
    plain = boundary_seconds("convergence_plain", d) * (size + op) / (mean + op)
    edge = boundary_seconds("convergence_edge", d) * (size + oe) / (mean + oe)
    return n_boundaries * plain + n_edge * edge + boundary_seconds("convergence_final", d)


def spectra_mem_mb(stage: str, d: int | None, n_groups: int, spectra: dict, n_boundaries: int = 1) -> int:
    """mem_mb of a spectral table job (MB): :func:`spectra_bytes` + BASE_MB, × SAFETY, at least MIN_MB (d unknown:
    MIN_MB)."""
    if not d:
        return MIN_MB
    return _mb(spectra_bytes(stage, int(d), n_groups, spectra, n_boundaries))


def convergence_counts(n_groups: int, n_boundaries: int, spectra: dict) -> tuple[int, int]:
    """(subset sizes, boundaries whose metrics are recomputed per size) of the convergence job."""
    s = spectra
    n_sizes = len(convergence_sizes(n_groups, s["convergence_sizes"]))
    n_edge = max(1, min(int(s["convergence_boundaries"]), n_boundaries))
    return n_sizes, min(n_boundaries, 2 * n_edge + 1)


def spectra_runtime_min(stage: str, d: int | None, n_boundaries: int, n_groups: int, spectra: dict) -> int:
    """runtime (minutes) of a spectral table job over `n_boundaries` boundaries: RATES per boundary (Schur:
    × its products relative to the default grid; convergence: per subset size, every boundary's products and
    the edge boundaries' decompositions), × SAFETY, at least MIN_MINUTES (d unknown: UNKNOWN_MINUTES)."""
    if not d:
        return UNKNOWN_MINUTES
    s = spectra
    if stage == "spectra_convergence":
        _, n_edge = convergence_counts(n_groups, n_boundaries, s)
        sizes = convergence_sizes(n_groups, s["convergence_sizes"])
        return _minutes(sum(convergence_size_seconds(d, S, n_boundaries, n_edge) for S in sizes))
    if stage == "spectra_schur_prep":
        return _minutes(schur_prep_seconds(d, s) * n_boundaries)
    rate = boundary_seconds(stage, d)
    if stage == "spectra_schur":
        rate *= max(1.0, _schur_grid_factor(s))
    return _minutes(rate * n_boundaries)


# ---- the cumulative chains and the convergence sizes fanned out (spectra.boundaries_per_job) ----------------
def cumulative_variant_bytes(d: int, n_groups: int, spectra: dict) -> float:
    """Peak bytes of one variant's job (rule ``spectra_cumulative_variant``): ``spectra_bytes("spectra_cumulative")``
    less the other variant's product and its K tangents (8 + 4·K bytes per d²); the boundary's J̄, Δ and the
    step's temporaries are the same."""
    s = spectra
    K = int(n_groups) if s["ci_blocks"] is None else min(int(s["ci_blocks"]), int(n_groups))
    return spectra_bytes("spectra_cumulative", d, n_groups, s) - (8 + 4 * K) * float(d) * d


def cumulative_variant_mem_mb(d: int | None, n_groups: int, spectra: dict) -> int:
    if not d:
        return MIN_MB
    return _mb(cumulative_variant_bytes(int(d), n_groups, spectra))


def cumulative_variant_runtime_min(d: int | None, n_boundaries: int, variant: str | None = None) -> int:
    """A variant's job: per boundary, the d² term of RATES["spectra_cumulative"] (reading J̄ and forming the
    replicates' deviations, which every variant's job does again) and the variant's share of its d³ term (the
    products and the singular values, RATES["cumulative_variants"]: the `update` products take the certified
    low-rank route, the `full` ones a full SVD; None: the larger share), × the boundaries."""
    if not d:
        return UNKNOWN_MINUTES
    c2, c3 = RATES["spectra_cumulative"]
    shares = RATES["cumulative_variants"]
    share = shares[variant] if variant is not None else max(shares.values())
    d = float(d)
    return _minutes((c2 * d**2 + c3 * d**3 * share) * n_boundaries)


def _one_size(spectra: dict, n_groups: int) -> dict:
    """The spectra section with one convergence size: what one subset's job computes (its size at most G)."""
    return {**spectra, "convergence_sizes": [max(2, int(n_groups))]}


def convergence_subset_mem_mb(d: int | None, n_groups: int, spectra: dict, n_boundaries: int) -> int:
    """A subset size's job (rule ``spectra_convergence_subset``): the convergence model at one size (one size's
    chains; the group means of S ≤ G groups counted at G: the job's size is known only once it runs)."""
    return spectra_mem_mb("spectra_convergence", d, n_groups, _one_size(spectra, n_groups), n_boundaries)


def convergence_subset_runtime_min(
    d: int | None, n_boundaries: int, n_groups: int, spectra: dict, subset: int | None = None
) -> int:
    """A subset size's job: its size's share of the single job (every boundary's products, the edge boundaries'
    decompositions, the final erank SVDs; ``convergence_size_seconds``), the `subset`-th of the sizes of
    `n_groups` groups (the Jacobian job's, or the config's before it ran: the sizes of fewer groups are no larger);
    None or an index past them: the largest size."""
    if not d:
        return UNKNOWN_MINUTES
    sizes = convergence_sizes(n_groups, spectra["convergence_sizes"]) or [2]
    S = sizes[subset] if subset is not None and 0 <= subset < len(sizes) else sizes[-1]
    n_edge = convergence_counts(n_groups, n_boundaries, spectra)[1]
    return _minutes(convergence_size_seconds(int(d), S, n_boundaries, n_edge))


def convergence_subsets(n_groups: int, n_boundaries: int, spectra: dict) -> int:
    """How many subset jobs a fanned-out convergence table has: the sizes the config's n_groups allows (the
    Jacobian job's G is at most that, and fewer groups never give more sizes), at least one (it writes the
    empty table of a single group)."""
    return max(1, convergence_counts(n_groups, n_boundaries, spectra)[0])
