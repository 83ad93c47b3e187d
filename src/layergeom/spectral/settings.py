"""The settings of the Jacobian job, importable without torch (the workflow reads them to build its DAG)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from functools import cache

from ..config import schema_defaults


@dataclass(frozen=True)
class JacobianSettings:
    """The ``spectra`` keys the Jacobian job reads (their defaults are config/schema/spectra.schema.yaml's)."""

    n_samples: int
    samples: str | int | None
    n_groups: int
    summary_samples: int
    method: str
    context: str
    chunk_size: int
    autodiff: str
    sample_spectral_norm: bool
    dtype: str

    @classmethod
    def from_config(cls, spectra: dict) -> JacobianSettings:
        """The Jacobian keys of a ``spectra`` section (other keys are ignored); a key the section lacks takes
        the schema's default (the workflow's sections are validated, so they have every key)."""
        values = {**schema_defaults("spectra"), **spectra}
        return cls(**{k: values[k] for k in JACOBIAN_KEYS})

    def as_dict(self) -> dict:
        return asdict(self)


#: the ``spectra`` keys of the Jacobian job, in field order
JACOBIAN_KEYS = tuple(f.name for f in fields(JacobianSettings))


# ---- the Schur surgery's product chains (schur.tsv), named for the fanned-out jobs ------------------------
#: the cumulative variants schur.tsv composes (``layergeom.spectral.cumulative.VARIANTS``; a test checks they agree)
SCHUR_VARIANTS = ("update", "full")
#: the non-normal parts of the surgery: the matrix's own N, and a random strictly upper-triangular N'
SCHUR_CONTROLS = ("none", "random")


def schur_alphas(alphas) -> list[float]:
    """The α of the surgery as floats, each once (a repeated α would step its chains twice), in config order."""
    return list(dict.fromkeys(float(a) for a in alphas))


def schur_runs(alphas) -> list[tuple[float, str]]:
    """The (α, control) operators of every boundary: each α with the own N, each α > 0 with the random N' (α = 0
    is one operator, the normal part, for both)."""
    alphas = schur_alphas(alphas)
    return [(a, c) for c in SCHUR_CONTROLS for a in alphas if not (a == 0 and c == "random")]


def schur_order_alphas(alphas, order_alphas=None) -> list[float]:
    """The α < 1 at which the random eigenvalue orders are composed (spectra.schur_order_alphas), in the order of
    `alphas`: None (the default) α = 0 where the grid has it, else none; a list must hold only α of `alphas`
    (α = 1 is J̄ itself: every order gives it, nothing to compose).

    Raises ValueError naming the first α of `order_alphas` that `alphas` lacks."""
    alphas = schur_alphas(alphas)
    if order_alphas is None:
        return [0.0] if 0.0 in alphas else []
    wanted = schur_alphas(order_alphas)
    for a in wanted:
        if a not in alphas:
            raise ValueError(
                f"spectra.schur_order_alphas: {a:g} is not one of spectra.alphas {[float(x) for x in alphas]}; "
                "list only α of the grid (or [] for no order spread)"
            )
    return [a for a in alphas if a < 1 and a in wanted]


def schur_chains(alphas, orders: int, variants=SCHUR_VARIANTS, order_alphas=None) -> list[tuple]:
    """The product chains of schur.tsv, one job each when a checkpoint fans out: ``("run", variant, α, control)``
    the cumulative J(α) of one operator, and ``("order", k)`` the products of the k-th random order of the
    non-zero modes, for every variant at every α of ``schur_order_alphas`` (one reordering J₀^π per boundary for
    all of them; none without such an α). Ordered as one job steps them: runs by (α, control) then variant,
    then the orders by k, so that a step's operator is formed once for the variants that follow it.

    α = 1 with the own N is J̄ itself, whose products cumulative.tsv composes: no chain (``schur.alpha_one``
    takes its rows from that table)."""
    alphas = schur_alphas(alphas)
    runs = [("run", v, a, c) for a, c in schur_runs(alphas) if (a, c) != (1.0, "none") for v in variants]
    spread = schur_order_alphas(alphas, order_alphas)
    return runs + ([("order", k) for k in range(int(orders))] if spread else [])


def schur_chain_name(chain: tuple) -> str:
    """A chain's name in file names and the rule's wildcard: ``update_none_a0.5``, ``order3``."""
    if chain[0] == "run":
        _, v, a, c = chain
        return f"{v}_{c}_a{a!r}"
    return f"order{int(chain[1])}"


def schur_chain_segment_name(name: str, segment: int, segments: int) -> str:
    """A chain segment's name (file names, the rule's wildcard): the chain's own with one segment
    (``update_none_a0.5``), else with the segment's index from 0 (``update_none_a0.5.s1``)."""
    return name if segments <= 1 else f"{name}.s{int(segment)}"


def chain_segment_bounds(n_boundaries: int, segments: int, prefix_fraction: float) -> list[tuple[int, int]]:
    """The depth ranges [start, end) of a Schur chain split over `segments` jobs (spectra.chain_segments), in
    order, covering 0..n−1, each non-empty (at most `n_boundaries` of them).

    A segment's job advances its chain's products through the depths before its own (no SVD: `prefix_fraction`
    of a full step, in [0, 1]) and steps through its own, so its cost is prefix_fraction·start + (end − start):
    the bounds minimise the largest cost over integer bounds, then (among those) maximise the smallest, so the
    later segments (a longer prefix) are shorter. Deterministic: the chain jobs and the gather agree. Pure
    Python (the workflow sizes the jobs with it)."""
    return list(_segment_bounds(int(n_boundaries), int(segments), float(prefix_fraction)))


@cache
def _segment_bounds(n: int, S: int, f: float) -> tuple[tuple[int, int], ...]:
    if n < 1 or S < 1:
        raise ValueError(f"a chain of {n} boundaries cannot be split into {S} segments")
    if not 0.0 <= f <= 1.0:
        raise ValueError(f"the prefix fraction of a chain step must be in [0, 1], not {f}")
    S = min(S, n)
    eps = 1e-9

    def cost(s, e):
        return f * s + (e - s)

    inf = float("inf")
    # worst[k][e]: the least possible largest cost of k segments covering [0, e)
    worst = [[inf] * (n + 1) for _ in range(S + 1)]
    worst[0][0] = 0.0
    for k in range(1, S + 1):
        for e in range(k, n + 1):
            worst[k][e] = min(max(worst[k - 1][s], cost(s, e)) for s in range(k - 1, e))
    top = worst[S][n] + eps
    # least[k][e]: the largest possible smallest cost of k segments covering [0, e), none above `top`
    least = [[-inf] * (n + 1) for _ in range(S + 1)]
    cut = [[-1] * (n + 1) for _ in range(S + 1)]
    least[0][0] = inf
    for k in range(1, S + 1):
        for e in range(k, n + 1):
            for s in range(k - 1, e):
                c = cost(s, e)
                if c <= top and least[k - 1][s] > -inf:
                    v = min(least[k - 1][s], c)
                    if v > least[k][e] - eps:  # a tie: the later cut (the earlier segments longer)
                        least[k][e], cut[k][e] = v, s
    bounds, e = [], n
    for k in range(S, 0, -1):
        s = cut[k][e]
        bounds.append((s, e))
        e = s
    return tuple(bounds[::-1])


# ---- the convergence table's subset sizes (convergence.tsv; known from the config, so the DAG can size its jobs) ---
def convergence_sizes(n_groups: int, sizes: list[int] | None) -> list[int]:
    """Nested numbers of leading groups: `sizes` (capped at G), or (None) 4 sizes from 2 to G spaced
    geometrically (G = 16: 2, 4, 8, 16; fewer only when G < 5 leaves fewer distinct sizes of at least 2 groups).

    Pure Python (the workflow sizes the jobs with it): numpy's ``round(geomspace(2, G, n))``, whose points are
    2·(G/2)^(i/(n−1)) with both ends exact (tests/test_resources_spectra.py checks they agree)."""
    if sizes:
        return sorted({min(int(s), n_groups) for s in sizes if int(s) >= 2})
    n = min(4, n_groups - 1)
    if n <= 0:
        return []
    points = [2.0] if n == 1 else [2.0 * (n_groups / 2.0) ** (i / (n - 1)) for i in range(n)]
    if n > 1:
        points[-1] = float(n_groups)
    out = sorted({int(round(v)) for v in points})
    if len(out) < n:  # rounding merged two: evenly spaced instead
        step = (n_groups - 2) / (n - 1) if n > 1 else 0.0
        out = sorted({int(round(2 + i * step)) for i in range(n)})
    return out
