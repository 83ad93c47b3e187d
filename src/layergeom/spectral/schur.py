"""Schur surgery (Paper B, docs/methods.md §2.5): dial the non-normal part of each J̄_b and watch the bottleneck.

Complex Schur ``J̄ = Q (Λ + N) Qᴴ``: Λ the eigenvalues, N strictly upper triangular, the non-normal part.
``J(α) = Q (Λ + αN) Qᴴ`` keeps the eigenvalues for every α; α=0 is a normal matrix (Henrici departure 0),
α=1 is J̄. Control: a random strictly upper-triangular N' with the same Frobenius norm as N (complex
Gaussian, seeded per boundary). J(α) is generally complex; the metrics use conjugate transposes.
Per-boundary metrics are unitarily invariant, so they are computed on the triangular ``Λ + αN`` directly;
the cumulative operators need ``J(α) = J₀ + α·Q N Qᴴ`` in the common basis, composed as the update
(``J(α)``) or the residual map (``I + J(α)``): both variants, like cumulative.tsv. The eigenvalue-only
metrics (mode counts and fractions, spectral radius) are J̄'s at every α and for both controls: they are
taken from ``spectral_metrics`` of J̄ itself, so that they equal spectra.tsv's. The Schur form in its canonical
order, the bases of other orders, the control's canonical basis and the first-order tangents that carry the
intervals (the cumulative J(α) products' tangents for K jackknife replicates, like cumulative.tsv) are
``schur_basis``'s.

**Spread over orders** (``orders``): the paper's definition leaves the order open, so the cumulative erank is
also composed for K orders drawn uniformly at random among the permutations of the non-zero modes (zero
block kept last; seeded by the boundary's depth, so a resumed run draws the same), and schur.tsv reports
its range at every depth (``erank_order_min``/``_max``). Each order's Schur basis is the Q factor of the
permuted eigenvector matrix of the triangular T (``permuted_basis``: the invariant subspace of the first k
eigenvalues is spanned by their eigenvectors), checked by its backward error ‖tril(Zᴴ T Z, −1)‖_F ≤ r·ε·‖T‖_F
and swapped into place by LAPACK (ztrexc) instead where that check fails (close, nearly defective eigenvalues).

**One implementation, one job or many.** Per boundary ``prepare_boundary`` (J̄'s metrics, the Schur form, the
order sampler's eigenvectors, the tangents, the b_* metrics), per boundary and chain ``step_chain`` (the chains
of ``settings.schur_chains``), at the end ``surgery_rows`` and ``surgery_table``: ``schur_surgery`` runs them in
one loop; a checkpoint fanned out over jobs (spectra.boundaries_per_job; layergeom.spectral.jobs.schur) runs the
first in its prep jobs, the second in a job per chain on the operators rebuilt from the preps' arrays (or per
depth segment of one, spectra.chain_segments: the products advanced without their SVDs through the depths
before it, ``step_chain(..., advance=True)``), the last in its gather, and writes the same bytes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pandas as pd

from ..resume.snapshots import NO_SNAPSHOTS, Snapshots
from ..runtime import LayergeomError, progress
from .cumulative import VARIANTS, ProductChain, step_operator, tangent_floor
from .intervals import jackknife_interval
from .schur_basis import (
    ControlBasis,
    OrderSampler,
    SchurForm,
    SchurTangent,
    order_eigenvectors,
    random_orders,
    schur_form,
    schur_tangent,
)
from .settings import schur_alphas, schur_chains, schur_order_alphas, schur_runs
from .spectra import Decomposition, decompose, spectral_metrics

CONTROLS = ("none", "random")
#: the per-boundary metrics that depend on the eigenvalues alone: J̄'s at every α and for both controls
EIGEN_ONLY = ("n_modes", "frac_complex", "frac_expansive", "frac_complex_d", "frac_expansive_d", "spectral_radius")


def random_strict_upper(d: int, fro: float, rng: np.random.Generator) -> np.ndarray:
    """Control: a complex Gaussian strictly upper-triangular d×d matrix rescaled to Frobenius norm `fro`."""
    N = np.triu(rng.standard_normal((d, d)) + 1j * rng.standard_normal((d, d)), 1)
    nrm = np.linalg.norm(N)
    return N * (fro / nrm) if nrm > 0 else N


# ---- the surgery table -------------------------------------------------------------------------------
def boundary_metrics_at(
    form: SchurForm, N: np.ndarray, alpha: float, sr_k: int, tol: float, eigen: dict, device: str = "cpu"
) -> dict:
    """Every per-boundary metric of J_b(α) = Q(Λ + αN)Qᴴ, from the unitarily similar triangular Λ + αN, with
    the eigenvalue-only ones (EIGEN_ONLY) from `eigen` (J̄'s ``spectral_metrics``: the same eigenvalues).

    α = 0 needs no SVD: a diagonal matrix has σ = |λ| sorted and U_kᴴV_k a diagonal of phases (SR = 1); the
    others' SVD runs on `device` (``decompose``).
    """
    if alpha == 0:
        lam = form.lam
        order = np.argsort(-np.abs(lam), kind="stable")
        d = len(lam)
        U = np.eye(d, dtype=np.complex128)[:, order] * np.exp(1j * np.angle(lam[order]))[None]
        Vh = np.eye(d, dtype=np.complex128)[order]
        dec = Decomposition(eigvals=lam, U=U, s=np.abs(lam[order]), Vh=Vh)
        T = np.diag(lam)
    else:
        T = np.diag(form.lam) + alpha * N
        dec = decompose(T, eigvals=form.lam, device=device)
    m = spectral_metrics(T, sr_k=sr_k, tol=tol, dec=dec) | {k: eigen[k] for k in EIGEN_ONLY if k in eigen}
    return {f"b_{k}": v for k, v in m.items()}


def order_spread(values: list[float]) -> tuple[float, float]:
    """(min, max) of the erank over the random orders (nan without orders or where one is undefined)."""
    v = np.asarray(values, dtype=np.float64)
    return (float(v.min()), float(v.max())) if len(v) and np.isfinite(v).all() else (float("nan"), float("nan"))


@dataclass
class SurgeryBoundary:
    """The operators of one boundary's surgery: J̄ (and its ``spectral_metrics``, as in spectra.tsv, where it was
    decomposed here), its Schur form in the canonical order, the normal part J₀, the own non-normal part
    R = J̄ − J₀ (= Q N Qᴴ up to rounding) and the random control R' = Q_c N' Q_cᴴ (N' seeded by [seed, boundary
    index], placed in the canonical basis Q_c of ``ControlBasis``); J₀, R, N' and R' are formed when first read
    (a chain of the own N never draws N')."""

    J: np.ndarray
    form: SchurForm
    seed: int
    index: int
    eigen: dict | None = None
    device: str = "cpu"  # where the decompositions run (a torch device string)
    Rr: np.ndarray | None = None  # R' = Q_c N' Q_cᴴ where a prep formed it (else formed when read)

    @classmethod
    def of(cls, J: np.ndarray, *, tol: float, sr_k: int, seed: int, index: int, device: str = "cpu") -> SurgeryBoundary:
        J = np.asarray(J, dtype=np.float64)
        eigen = spectral_metrics(J, sr_k=sr_k, tol=tol, dec=decompose(J, device=device))  # J̄'s, as in spectra.tsv
        form = schur_form(J, tol, n_modes=eigen["n_modes"])
        return cls(J=J, form=form, seed=seed, index=index, eigen=eigen, device=device)

    @cached_property
    def J0(self) -> np.ndarray:
        return self.form.normal_part  # (d, d)

    @cached_property
    def R_own(self) -> np.ndarray:
        return self.J - self.J0

    @cached_property
    def Nr(self) -> np.ndarray:
        rng = np.random.default_rng([self.seed, self.index])
        return random_strict_upper(self.J.shape[0], float(np.linalg.norm(self.form.N)), rng)

    @cached_property
    def basis(self) -> ControlBasis:
        """The canonical Schur basis of the random control (``ControlBasis``)."""
        return ControlBasis.of(self.form, self.seed, self.index)

    @cached_property
    def R_rand(self) -> np.ndarray:
        if self.Rr is not None:  # formed by the prep
            return self.Rr
        Qc = self.basis.Q
        return Qc @ self.Nr @ Qc.conj().T

    def non_normal(self, control: str) -> np.ndarray:
        """The strictly upper-triangular N of a control: the own N, or the random N'."""
        return self.form.N if control == "none" else self.Nr

    def operator(self, alpha: float, control: str, D: np.ndarray | None, tan: SchurTangent | None):
        """(J(α) of the control, its replicates' tangents or None): J̄ itself at α = 1 with the own N (its
        tangents are D), J₀ + αR with δJ₀(1 − α) + αD, or J₀ + αR' with δJ₀ + α δR' (``control_tangent``)."""
        if alpha == 1 and control == "none":
            return self.J, D
        if control == "none":
            return self.J0 + alpha * self.R_own, None if D is None else tan.dJ0 * (1 - alpha) + alpha * D
        M = self.J0 + alpha * self.R_rand
        if D is None:
            return M, None
        dR = tan.dRr if tan.dRr is not None else control_tangent(self, tan)
        return M, (tan.dJ0 + alpha * dR).astype(np.complex64)

    def boundary_metrics(self, alpha: float, control: str, which: str, *, sr_k: int, tol: float) -> dict | None:
        """The b_* columns of one (α, control) (None where `which` asks for none): spectra.tsv's row for J̄
        itself, else ``boundary_metrics_at``."""
        if alpha == 1 and control == "none" and which != "none":
            return {f"b_{k}": v for k, v in self.eigen.items()}  # J̄ itself: spectra.tsv's row
        if which == "all" or (which == "own" and control == "none"):
            return boundary_metrics_at(self.form, self.non_normal(control), alpha, sr_k, tol, self.eigen, self.device)
        return None


def control_tangent(b: SurgeryBoundary, tan: SchurTangent) -> np.ndarray:
    """δR' (K, d, d) complex64 of the random control R' = Q_c N' Q_cᴴ for each replicate: Q_c(W_c N' − N' W_c)Q_cᴴ
    + (δ‖N‖/‖N‖) R', W_c the canonical basis's rotation (``ControlBasis.rotation`` of the tangent's W), N' a
    fixed draw rescaled to ‖N‖_F."""
    if tan.W is None:
        raise ValueError("the random control's tangent needs the Schur form's rotations (schur_tangent keep_rotation)")
    Qc = b.basis.Q
    Nr, R = b.Nr, b.R_rand
    out = np.empty((len(tan.W), *R.shape), dtype=np.complex64)
    for k, W in enumerate(tan.W):
        Wc = b.basis.rotation(np.asarray(W, dtype=np.complex128))
        out[k] = Qc @ (Wc @ Nr - Nr @ Wc) @ Qc.conj().T + tan.dnorm_rel[k] * R
    return out


def wants_interval(alpha: float, control: str, ci_controls) -> bool:
    """Whether the chains of (α, control) carry the replicates' tangents (given intervals): the controls in
    ``ci_controls``, and α = 0 (one operator for both controls)."""
    return control in ci_controls or alpha == 0


def needs_tangent(runs: list[tuple[float, str]], ci_controls, intervals: bool) -> bool:
    """Whether a boundary's Schur form needs its tangents: some chain with an interval other than J̄ itself."""
    return intervals and any((a != 1 or c != "none") and wants_interval(a, c, ci_controls) for a, c in runs)


@dataclass
class SurgeryPrep:
    """One boundary's share of the surgery that does not depend on a chain (``prepare_boundary``): its
    operators (``SurgeryBoundary``), the eigenvectors of the order sampler (``order_eigenvectors``; None
    without random orders or where LAPACK's are unusable), the tangents of the Schur form (None without
    intervals) and its ``record``: the boundary, the b_* columns of every (α, control) of ``schur_runs`` and
    ‖N‖_F of each control. A fanned-out prep job writes the form, Y and the tangents for the chain jobs and
    keeps the record for the gather."""

    boundary: SurgeryBoundary
    Y: np.ndarray | None
    tangent: SchurTangent | None
    record: dict


def prepare_boundary(
    name: str,
    J: np.ndarray,
    D: np.ndarray | None,
    *,
    index: int,
    seed: int,
    tol: float,
    sr_k: int,
    alphas: list[float],
    boundary_metrics: str,
    orders: int,
    ci_controls,
    order_alphas,
    device: str = "cpu",
) -> SurgeryPrep:
    """The per-boundary step of the surgery (the single job and the prep jobs run it): J̄'s metrics and Schur
    form, the order sampler's eigenvectors, the tangents (D: the replicates' deviations, None without
    intervals) and the b_* metrics of every (α, control); the decompositions on `device`."""
    runs = schur_runs(alphas)
    b = SurgeryBoundary.of(J, tol=tol, sr_k=sr_k, seed=seed, index=index, device=device)
    spread = int(orders) > 0 and bool(schur_order_alphas(alphas, order_alphas))
    Y = order_eigenvectors(b.form) if spread else None
    tan = None
    if needs_tangent(runs, set(ci_controls), D is not None):
        tan = schur_tangent(b.form, b.J, D, keep_rotation="random" in set(ci_controls))
        if tan.W is not None:  # the random control's tangent, once for every α (the rotations are then done)
            tan.dRr, tan.W = control_tangent(b, tan), None
    metrics = [b.boundary_metrics(a, c, boundary_metrics, sr_k=sr_k, tol=tol) for a, c in runs]
    fro = {c: float(np.linalg.norm(b.non_normal(c))) for c in CONTROLS}
    return SurgeryPrep(b, Y, tan, {"boundary": name, "metrics": metrics, "fro": fro})


class BoundaryStep:
    """What the product chains read at one boundary: its operators, the Schur form's tangents, the replicates'
    deviations D (None without intervals) and the sampler of the random orders. The operator of one
    (α, control) and the normal part of one order are formed once for the chains that read them in a row
    (both variants, in ``schur_chains``' order), and dropped when another is asked for."""

    def __init__(self, b: SurgeryBoundary, tangent: SchurTangent | None, D: np.ndarray | None,
                 Y: np.ndarray | None, orders: int, ci_controls):  # fmt: skip
        self.b, self.tangent, self.D, self.Y, self.orders = b, tangent, D, Y, int(orders)
        self.ci_controls = set(ci_controls)
        self._op = self._J0k = (None, None)

    @cached_property
    def sampler(self) -> OrderSampler:
        return OrderSampler(self.b.form, self.Y)

    @cached_property
    def perms(self) -> list[np.ndarray]:
        return random_orders(self.sampler.r, self.orders, self.b.seed, self.b.index)

    def operator(self, alpha: float, control: str):
        """(M, dM) of ``SurgeryBoundary.operator``, with the deviations where the chain carries an interval."""
        if self._op[0] != (alpha, control):
            self._op = (None, None)
            want = self.D is not None and wants_interval(alpha, control, self.ci_controls)
            self._op = ((alpha, control), self.b.operator(alpha, control, self.D if want else None, self.tangent))
        return self._op[1]

    def order_normal_part(self, k: int) -> np.ndarray:
        """J₀^π of the k-th random order (``OrderSampler.normal_part``)."""
        if self._J0k[0] != k:
            self._J0k = self._op = (None, None)  # the operators' chains are done with this boundary
            self._J0k = (k, self.sampler.normal_part(self.perms[k]))
        return self._J0k[1]


def step_chain(
    chain: tuple,
    chains: dict,
    st: BoundaryStep,
    *,
    alphas: list[float],
    weights,
    ci_level: float,
    device: str = "cpu",
    advance: bool = False,
    variants=VARIANTS,
    order_alphas,
):
    """One boundary's step of one chain of ``schur_chains`` (the single job and the chain jobs run it), its
    ProductChain(s) in `chains` (created at the first step). A run ("run", v, α, control): (erank, log‖C‖_F,
    erank_ci_low, erank_ci_high), the interval nan without tangents; an order ("order", k): per variant of
    `variants` the erank at each α of `order_alphas` (``settings.schur_order_alphas``), in order, from one
    reordering J₀^π. New ProductChains compute on `device`; the `update` products take the certified low-rank
    singular values where they hold (``cumulative.certified_svd``).

    ``advance``: the products only (``ProductChain.advance``: the same operators, the same products in the same
    order as a step, no SVD; returns None): a chain segment's job runs it through the depths before its own
    (the SVD at one depth feeds no later one), so its products are bit for bit those of the whole chain."""
    d = st.b.J.shape[0]
    if chain[0] == "run":
        _, v, alpha, control = chain
        M, dM = st.operator(alpha, control)
        key = (v, alpha, control)
        if chains.get(key) is None:
            chains[key] = ProductChain(tangent_floor(d), device, lowrank=v == "update")
        if advance:
            chains[key].advance(step_operator(M, v), dM)
            return None
        erank, log_norm, reps = chains[key].step(step_operator(M, v), dM)
        lo, hi = (np.nan, np.nan)
        if dM is not None:
            lo, hi = jackknife_interval(erank, reps, weights, ci_level, "log")
        return erank, log_norm, lo, hi
    _, k = chain
    J0k = st.order_normal_part(k)  # (d, d) one reordering for every variant and α
    out = []
    for v in variants:
        row = []
        for a in order_alphas:
            M = J0k if a == 0 else J0k + a * (st.b.J - J0k)
            key = (v, a, k)
            if chains.get(key) is None:
                chains[key] = ProductChain(tangent_floor(d), device, lowrank=v == "update")
            if advance:
                chains[key].advance(step_operator(M, v))
            else:
                row.append(chains[key].step(step_operator(M, v))[0])  # singular values only
        out.append(row)
    return None if advance else out


#: the cumulative.tsv columns a row of schur.tsv at α = 1 with the own N takes (J̄ itself: the same products)
ALPHA_ONE_COLUMNS = ("erank", "log_norm", "erank_ci_low", "erank_ci_high")


def alpha_one(cumulative: pd.DataFrame, boundaries: list[str], variants) -> dict:
    """The results of the α = 1, own-N "chains" (``step_chain``'s (erank, log‖C‖_F, ci_low, ci_high) per depth)
    from cumulative.tsv: J(1) = J̄, whose products that table composes (the same operators, products and
    singular-value routes: the same erank and log-norm, bit for bit), with its interval (over its replicates,
    spectra.ci_blocks). Raises LayergeomError naming what does not match the checkpoint's boundaries."""
    out = {}
    for v in variants:
        part = cumulative[cumulative["variant"] == v].sort_values("depth")
        if part["boundary"].tolist() != list(boundaries):
            raise LayergeomError(f"cumulative.tsv's {v} rows hold the boundaries {part['boundary'].tolist()}, not "
                                 f"{list(boundaries)} in depth order: rerun spectra_cumulative")  # fmt: skip
        cols = [part[c].to_numpy(np.float64) if c in part else np.full(len(part), np.nan) for c in ALPHA_ONE_COLUMNS]
        out["run", v, 1.0, "none"] = [(float(e), float(n), float(lo), float(hi)) for e, n, lo, hi in zip(*cols)]
    return out


def surgery_rows(records: list[dict], results: dict, *, alphas: list[float], variants: list[str], orders: int,
                 order_alphas):  # fmt: skip
    """The rows of schur.tsv from the boundaries' records (``SurgeryPrep.record``, depth order) and the chains'
    results (chain -> its ``step_chain`` results, depth order), in the order one job composes them. The order
    spread (erank_order_min/max) at the α of ``schur_order_alphas`` and at α = 1 (J̄ itself: min = max); nan
    elsewhere."""
    alphas = schur_alphas(alphas)
    spread = schur_order_alphas(alphas, order_alphas)
    rows = []
    for bi, rec in enumerate(records):
        for (alpha, control), bm in zip(schur_runs(alphas), rec["metrics"]):
            for v in variants:
                erank, log_norm, lo, hi = results["run", v, alpha, control][bi]
                row = {"variant": v, "alpha": alpha, "control": control, "depth": bi + 1, "erank": erank}
                omin, omax = (np.nan, np.nan)
                if orders and control == "none":
                    if alpha == 1:
                        omin, omax = (erank, erank)
                    elif alpha in spread:
                        at = spread.index(alpha)
                        vi = variants.index(v)
                        omin, omax = order_spread([results["order", k][bi][vi][at] for k in range(int(orders))])
                row |= {"erank_ci_low": lo, "erank_ci_high": hi, "erank_order_min": omin, "erank_order_max": omax}
                row |= {"boundary": rec["boundary"], "log_norm": log_norm, "nonnormal_fro": rec["fro"][control]}
                if bm is not None:
                    row |= bm
                rows.append(row)
    return rows


def _chain_states(chains: dict) -> dict:
    return {k: c and c.state() for k, c in chains.items()}


def _chains_from(states: dict, device: str = "cpu") -> dict:
    return {k: None if c is None else ProductChain.from_state(c, device) for k, c in states.items()}


def check_surgery(boundary_metrics: str, orders: int) -> None:
    if boundary_metrics not in ("own", "all", "none"):
        raise ValueError(f"boundary_metrics must be own, all or none, not '{boundary_metrics}'")
    if int(orders) < 0:
        raise ValueError(f"the number of random Schur orders must be ≥ 0, not {orders}")


def surgery_table(rows: list[dict], variants: list[str]) -> pd.DataFrame:
    """schur.tsv from the rows composed: α = 0 copied to the random control (one operator), the key columns
    first, sorted by variant, control, α and depth (rows without per-boundary metrics get nan there)."""
    table = pd.DataFrame(rows)
    zero = table[(table["alpha"] == 0) & (table["control"] == "none")]
    table = pd.concat([table, zero.assign(control="random")], ignore_index=True)  # α = 0: one operator
    first = ["alpha", "control", "depth", "erank", "erank_ci_low", "erank_ci_high", "variant", "erank_order_min",
             "erank_order_max"]  # fmt: skip
    table = table[first + [c for c in table.columns if c not in first]]
    vorder = {v: i for i, v in enumerate(variants)}
    corder = {c: i for i, c in enumerate(CONTROLS)}
    table = table.sort_values(
        ["variant", "control", "alpha", "depth"],
        key=lambda s: s.map(vorder) if s.name == "variant" else (s.map(corder) if s.name == "control" else s),
        kind="stable",
    )
    return table.reset_index(drop=True)


def schur_surgery(
    jacobians,
    *,
    alphas: Iterable[float],
    seed: int,
    sr_k: int,
    tol: float,
    boundary_metrics: str,
    orders: int,
    variants: Iterable[str] = VARIANTS,
    deviations=None,
    weights: np.ndarray | None = None,
    ci_level: float,
    ci_controls: Iterable[str],
    order_alphas: Iterable[float] | None,
    cumulative: pd.DataFrame,
    snapshots: Snapshots = NO_SNAPSHOTS,
    device: str = "cpu",
) -> pd.DataFrame:
    """schur.tsv: one row per (variant, alpha, control, depth) with erank of the cumulative J(α) product.

    ``jacobians`` maps boundary -> J̄_b (depth order; a lazy mapping is read once per boundary).
    ``deviations`` (optional) maps boundary -> (K, d, d) replicate deviations of J̄_b, with their jackknife
    ``weights``: then erank_ci_low/high for the controls in ``ci_controls`` (nan for the others).
    ``orders`` K: erank_order_min/max, the range of the erank over K random orders of the non-zero modes
    (``OrderSampler``), for the own N at the α of `order_alphas` (spectra.schur_order_alphas; α = 1 is J̄:
    min = max = erank; the other α, the random control's α > 0 rows and K = 0: nan). Extra columns: the boundary at that depth, log ‖C_n‖_F, the ‖N‖_F of the boundary
    and every per-boundary metric of J_b(α), prefixed ``b_`` — for the matrix's own N (boundary_metrics
    ``own``), for the random control too (``all``) or never (``none``; nan); the eigenvalue-only ones and
    every one at α = 1 with the own N are ``spectral_metrics`` of J̄, as in spectra.tsv. α = 0 is the same
    operator for both controls (computed once); α = 1 with the own N is J̄_b itself (composed in real
    arithmetic, like cumulative.tsv). ``snapshots`` (``layergeom.resume.Snapshots``; default none) resumes
    after its last snapshot (the boundaries it covers are not read) and saves the products as it goes; each
    boundary's control N' and random orders are seeded by its depth, so a resumed run draws the same.

    Per boundary: its share that no chain owns (``prepare_boundary``: J̄'s metrics and Schur form, the order
    sampler, the tangents, the b_* metrics), then one step of every chain of ``schur_chains``
    (``step_chain``); the rows (``surgery_rows``) and the table (``surgery_table``) at the end. A checkpoint
    fanned out over jobs (layergeom.spectral.jobs.schur: ``write_schur_prep``, ``write_schur_chain``,
    ``gather_schur``) runs the same functions. The decompositions and the product chains compute on `device`
    (a torch device string, ``workflow.job_device``); the Schur forms, their reordering and the Sylvester solves
    in scipy on the CPU. A progress bar counts the boundaries.
    """
    check_surgery(boundary_metrics, orders)
    names = list(jacobians)
    alphas = schur_alphas(alphas)
    variants = list(variants)
    ci_controls = set(ci_controls)
    spread_alphas = schur_order_alphas(alphas, order_alphas)
    plan = schur_chains(alphas, orders, variants, spread_alphas)
    chains = {(v, a, c): None for _, v, a, c in (ch for ch in plan if ch[0] == "run")}
    spread = {(v, a, k): None for _, k in (ch for ch in plan if ch[0] == "order") for v in variants
              for a in spread_alphas}  # fmt: skip
    records, results = [], {ch: [] for ch in plan}
    last = snapshots.load()
    start = 0 if last is None else last["done"]
    if last is not None:
        records, results = last["state"]["records"], last["state"]["results"]
        chains, spread = _chains_from(last["state"]["chains"], device), _chains_from(last["state"]["orders"], device)
    bar = progress(total=len(names), initial=start, desc="schur", unit="boundary")
    for bi in range(start, len(names)):
        name = names[bi]
        D = None if deviations is None else np.asarray(deviations[name])
        prep = prepare_boundary(name, jacobians[name], D, index=bi, seed=seed, tol=tol, sr_k=sr_k, alphas=alphas,
                                boundary_metrics=boundary_metrics, orders=orders, ci_controls=ci_controls,
                                order_alphas=spread_alphas, device=device)  # fmt: skip
        records.append(prep.record)
        st = BoundaryStep(prep.boundary, prep.tangent, D, prep.Y, orders, ci_controls)
        for ch in plan:
            held = chains if ch[0] == "run" else spread
            results[ch].append(step_chain(ch, held, st, alphas=alphas, weights=weights, ci_level=ci_level,
                                          device=device, variants=variants, order_alphas=spread_alphas))  # fmt: skip
        del st, prep
        snapshots.save(bi + 1, lambda: {"records": records, "results": results, "chains": _chain_states(chains),
                                        "orders": _chain_states(spread)})  # fmt: skip
        bar.update()
    bar.close()
    results |= alpha_one(cumulative, names, variants) if 1.0 in alphas else {}
    rows = surgery_rows(records, results, alphas=alphas, variants=variants, orders=orders,
                        order_alphas=spread_alphas)  # fmt: skip
    return surgery_table(rows, variants)
