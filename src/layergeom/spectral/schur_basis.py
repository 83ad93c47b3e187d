"""The Schur form of J̄ for the surgery (layergeom.spectral.schur, docs/methods.md §2.5): its canonical order, the
bases of other orders, the random control's canonical basis, and their first-order change under J̄ -> J̄ + Δ.

**Order of the Schur form.** J = Q T Qᴴ is a Schur form for every order of the eigenvalues along the diagonal
of T, and the normal part J₀ = QΛQᴴ depends on it (Q's leading k columns span the invariant subspace of the
first k eigenvalues) whenever N ≠ 0; LAPACK's order is whatever its QR iteration deflates first. The order
here is canonical (``canonical_order``): the numerically non-zero modes (as many as spectra.tsv's ``n_modes``,
the largest |λ|) by **|λ| descending**, a conjugate pair adjacent (Im λ > 0 first), equal moduli by
|arg λ| ascending; then the numerically zero modes (grouped-query attention: d − n_kv·d_head of them, at
rounding level) in LAPACK's order. Why |λ| descending: it is the order in which orthogonal (subspace) iteration
on J̄ finds its Schur vectors, so for every k at a gap |λ_k| > |λ_k+1| the leading k Schur vectors span J̄'s
dominant k-dimensional invariant subspace, the directions that powers and products of J̄ keep, and J₀ keeps
exactly those subspaces with their eigenvalues. Pairs adjacent: at the end of a pair the leading subspace is
a real invariant subspace of the real J̄ (as in its real Schur form). Zero modes last: J₀ then maps onto the
invariant subspace of the modes J̄ resolves (for a semisimple zero eigenvalue, the range of J̄), whatever
rounding did to the zero block. The reordering is LAPACK's (ztrexc swaps, unitary: Q T Qᴴ is unchanged).

**Intervals** (``intervals``): the cumulative J(α) products carry first-order tangents for K jackknife
replicates, like cumulative.tsv. The tangent of J(α) = αJ̄ + (1−α)J₀ needs that of J₀: with Q' = Q(I + W),
W skew-Hermitian, the rotated T stays triangular when the strictly lower part of E + TW − WT vanishes
(E = QᴴΔQ), a triangular Sylvester system solved blockwise (LAPACK trsyl, recursive, level-3 updates);
then δJ₀ = Q(WΛ − ΛW + diag(E + TW − WT))Qᴴ. Rotations inside the numerically zero block are frozen (its
eigenvalues are rounding, its J₀ is 0). The tangent holds the eigenvalue order fixed: it is the sampling
variability of the surgery at the canonical order (the spread over orders is reported beside it). The random
control Q N' Qᴴ (a fixed draw N') also depends on the phases of the Schur vectors, which LAPACK fixes
arbitrarily; its tangent carries them along (W_ii = 0).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg
from scipy.linalg.lapack import ztrexc, ztrsyl
from scipy.optimize import linear_sum_assignment

from .spectra import nonzero_modes

#: last word of the seed sequence [seed, boundary index, ORDER_STREAM] of the random orders (the control: 2 words)
ORDER_STREAM = 23
#: last word of the seed sequence [seed, boundary index, BASIS_STREAM] of the control's canonical basis
BASIS_STREAM = 29


@dataclass
class SchurForm:
    """J = Q (diag(lam) + N) Qᴴ with N strictly upper triangular; the first `n_nonzero` modes are non-zero."""

    Q: np.ndarray  # (d, d) unitary
    lam: np.ndarray  # (d,) eigenvalues
    N: np.ndarray  # (d, d) strictly upper triangular
    n_nonzero: int | None = None

    @property
    def normal_part(self) -> np.ndarray:
        """J₀ = Q diag(λ) Qᴴ: the normal matrix with the same eigenvalues and Schur vectors."""
        return (self.Q * self.lam) @ self.Q.conj().T


def schur_form(J: np.ndarray, tol: float, n_modes: int | None = None) -> SchurForm:
    """Complex Schur decomposition J = Q (Λ + N) Qᴴ in complex128, in the canonical order (``canonical_order``).

    A real J goes through the real Schur form and scipy.linalg.rsf2csf (a complex Schur form of J, about
    twice as fast as the complex QR iteration that ``schur(output='complex')`` runs on a real input).
    `n_modes` non-zero modes (spectra.tsv's count; default: ``nonzero_modes`` of the Schur eigenvalues with
    the relative tolerance `tol`, ``spectra.rank_tolerance``) lead, the rest is the zero block.
    """
    J = np.asarray(J)
    real = not np.iscomplexobj(J)
    if real:
        T, Q = scipy.linalg.rsf2csf(*scipy.linalg.schur(J.astype(np.float64), output="real"))
    else:
        T, Q = scipy.linalg.schur(J.astype(np.complex128), output="complex")
    lam = np.diag(T)
    if n_modes is None:
        n_modes = int(nonzero_modes(lam, tol).sum())
    T, Q = reorder_schur(T, Q, canonical_order(lam, n_modes, real))
    return SchurForm(Q=Q, lam=np.diag(T).copy(), N=np.triu(T, 1), n_nonzero=int(n_modes))


def conjugate_pairs(lam: np.ndarray) -> np.ndarray:
    """partner[i] = the index of λ_i's conjugate (Im λ_i ≠ 0; matched by least |λ_j − conj λ_i|), else −1."""
    partner = np.full(len(lam), -1)
    up, lo = np.flatnonzero(lam.imag > 0), np.flatnonzero(lam.imag < 0)
    if len(up) and len(lo):
        rows, cols = linear_sum_assignment(np.abs(np.conj(lam[up])[:, None] - lam[lo][None, :]))  # (p, q) cost
        partner[up[rows]], partner[lo[cols]] = lo[cols], up[rows]
    return partner


def canonical_order(lam: np.ndarray, n_modes: int, real: bool = True) -> np.ndarray:
    """Positions of `lam` in the canonical order: the `n_modes` largest |λ| by |λ| descending, then the rest.

    Ties in |λ| go by |arg λ| ascending, then Im λ > 0 first, then by position. For a real matrix (`real`) a
    conjugate pair is one unit (modulus and |arg| of its Im > 0 member) placed Im > 0 first, so the pair stays
    adjacent even where rounding makes its two moduli differ in the last bit. The rest (the numerically zero
    modes) keeps its order.
    """
    lam = np.asarray(lam)
    n = len(lam)
    partner = conjugate_pairs(lam) if real else np.full(n, -1)
    heads = [i for i in range(n) if partner[i] < 0 or lam[i].imag > 0]  # one per unit
    heads.sort(key=lambda i: (-abs(lam[i]), abs(np.angle(lam[i])), lam[i].imag < 0, i))
    seq = [j for i in heads for j in ((i,) if partner[i] < 0 else (i, partner[i]))]
    lead = seq[: int(n_modes)]
    taken = set(lead)
    return np.array(lead + [i for i in range(n) if i not in taken], dtype=int)


def reorder_schur(T: np.ndarray, Q: np.ndarray, order) -> tuple[np.ndarray, np.ndarray]:
    """The Schur form (T', Q') with diag(T') = diag(T)[order] (LAPACK ztrexc swaps, unitary: Q'T'Q'ᴴ = Q T Qᴴ).

    Insertion: the eigenvalue wanted at position k moves up from where it is (the others shift down, keeping
    their order), so the swaps are the inversions of `order`; LAPACK's order is close to |λ| descending already.
    """
    order = [int(i) for i in order]
    pos = list(range(len(order)))  # pos[k]: the original index now at position k
    if order == pos:
        return T, Q
    T, Q = np.asfortranarray(T, dtype=np.complex128), np.asfortranarray(Q, dtype=np.complex128)
    for k, want in enumerate(order):
        cur = pos.index(want, k)
        if cur != k:
            T, Q, info = ztrexc(T, Q, cur + 1, k + 1, overwrite_a=1, overwrite_q=1)
            if info != 0:
                raise RuntimeError(f"LAPACK ztrexc failed to reorder the Schur form (info={info})")
            pos.insert(k, pos.pop(cur))
    return T, Q  # ztrexc never writes below the diagonal


class OrderSampler:
    """The normal parts J₀^π = Q_π Λ_π Q_πᴴ of J̄ at other orders π of its non-zero modes (zero block last).

    ``normal_part(perm)`` permutes the first r = n_nonzero modes of the canonical form; the zero block's
    Schur vectors and eigenvalues stay (their invariant subspace is the same for every order of the rest).
    """

    def __init__(self, form: SchurForm, Y: np.ndarray | None | str = "compute"):
        self.form = form
        d = len(form.lam)
        self.r = d if form.n_nonzero is None else int(form.n_nonzero)
        r = self.r
        self.T11 = np.diag(form.lam[:r]) + form.N[:r, :r]  # (r, r) upper triangular
        Qz = form.Q[:, r:]
        self.J0_zero = (Qz * form.lam[r:]) @ Qz.conj().T  # (d, d): the zero block's share of J₀
        # the eigenvectors of T11 (``order_eigenvectors``), or those it gave before (a fanned-out Schur prep's)
        self.Y = order_eigenvectors(form) if isinstance(Y, str) else Y
        self.fallbacks = 0

    def basis(self, perm: np.ndarray) -> np.ndarray:
        """Z (r, r) unitary with Zᴴ T11 Z upper triangular and diagonal λ[perm] (``permuted_basis``, or LAPACK)."""
        Z = None if self.Y is None else permuted_basis(self.T11, self.Y, perm)
        if Z is None:
            self.fallbacks += 1
            Z = reorder_schur(self.T11, np.eye(self.r, dtype=np.complex128), perm)[1]
        return Z

    def normal_part(self, perm: np.ndarray) -> np.ndarray:
        """J₀^π = (Q_1 Z) diag(λ[perm]) (Q_1 Z)ᴴ + the zero block's Q_2 Λ_2 Q_2ᴴ, (d, d) complex."""
        r = self.r
        if r < 2:
            return self.form.normal_part
        W = self.form.Q[:, :r] @ self.basis(perm)  # (d, r) the Schur vectors in order π
        return (W * self.form.lam[:r][perm]) @ W.conj().T + self.J0_zero


def order_eigenvectors(form: SchurForm) -> np.ndarray | None:
    """The eigenvectors Y (r, r) of the leading triangular block T11 of `form` (r = its non-zero modes; LAPACK
    trevc), in diagonal order; None where r < 2 or LAPACK returned them in another order or not finite (every
    order is then swapped into place by ztrexc)."""
    d = len(form.lam)
    r = d if form.n_nonzero is None else int(form.n_nonzero)
    if r <= 1:
        return None
    w, Y = scipy.linalg.eig(np.diag(form.lam[:r]) + form.N[:r, :r])  # eigenvectors of a triangular matrix
    return Y if np.array_equal(w, form.lam[:r]) and np.isfinite(Y).all() else None


def permuted_basis(T: np.ndarray, Y: np.ndarray, perm: np.ndarray) -> np.ndarray | None:
    """Z = Q factor of Y[:, perm] (Y the eigenvectors of the upper-triangular T): its first k columns span the
    invariant subspace of λ[perm[:k]], so Zᴴ T Z is upper triangular with diagonal λ[perm]. None when its
    backward error ‖tril(Zᴴ T Z, −1)‖_F exceeds r·ε·‖T‖_F (close eigenvalues: their eigenvectors are not
    accurate enough; LAPACK's swaps are backward stable there)."""
    r = len(T)
    Z, _ = np.linalg.qr(Y[:, perm])  # (r, r)
    lower = np.tril(Z.conj().T @ (T @ Z), -1)
    ok = np.linalg.norm(lower) <= r * np.finfo(np.float64).eps * np.linalg.norm(T)
    return Z if ok else None


def random_orders(n: int, K: int, seed: int, index: int) -> list[np.ndarray]:
    """K uniformly random permutations of n modes, seeded by [seed, boundary index, ORDER_STREAM]."""
    g = np.random.default_rng([int(seed), int(index), ORDER_STREAM])
    return [g.permutation(n) for _ in range(int(K))]


@dataclass
class ControlBasis:
    """The Schur basis in which the random control N' is placed, made a function of J̄ and its seed alone.

    LAPACK fixes each Schur vector up to a unit phase, and the numerically zero block (grouped-query attention:
    d − r modes at rounding level) up to any unitary rotation of its invariant subspace; a fixed draw N' placed
    in that basis (Q N' Qᴴ) follows those arbitrary choices, so float32 rounding of J̄ could move the control's
    erank by percents. Canonical instead: each non-zero mode's Schur vector q_j times the phase that makes ωᵀq_j
    real and positive (ω a seeded real Gaussian vector), and for the zero block the Q factor (diagonal of R real
    and positive: unique) of a seeded real Gaussian Ω₂ (d, d − r) projected onto the orthogonal complement of the
    non-zero modes' invariant subspace. Q_c = Q·D with D = diag(φ) ⊕ U₂ (U₂ = Q₂ᴴQ₂c).
    """

    Q: np.ndarray  # (d, d) Q_c
    phases: np.ndarray  # (r,) φ
    c: np.ndarray  # (d,) ωᵀQ (LAPACK's basis)
    U2: np.ndarray  # (d − r, d − r) Q₂ᴴ Q₂c
    P1: np.ndarray  # (r, d − r) Q₁ᴴ Ω₂
    R2: np.ndarray  # (d − r, d − r) R of the QR of (I − Q₁Q₁ᴴ)Ω₂

    @classmethod
    def of(cls, form: SchurForm, seed: int, index: int) -> ControlBasis:
        Q = form.Q
        d = Q.shape[0]
        r = d if form.n_nonzero is None else int(form.n_nonzero)
        g = np.random.default_rng([int(seed), int(index), BASIS_STREAM])
        omega = g.standard_normal(d)
        c = omega @ Q  # (d,)
        mag = np.abs(c[:r])
        phases = np.where(mag > 0, np.conj(c[:r]) / np.where(mag > 0, mag, 1.0), 1.0)
        Q1, Q2 = Q[:, :r], Q[:, r:]
        if r < d:
            omega2 = g.standard_normal((d, d - r))
            P1 = Q1.conj().T @ omega2  # (r, d − r)
            Q2c, R2 = np.linalg.qr(omega2 - Q1 @ P1)  # (d, d − r), (d − r, d − r)
            ph = np.diagonal(R2) / np.abs(np.diagonal(R2))  # unique QR: diag(R) > 0
            Q2c, R2 = Q2c * ph[None], np.conj(ph)[:, None] * R2
            U2 = Q2.conj().T @ Q2c
        else:
            P1 = np.zeros((r, 0), dtype=np.complex128)
            Q2c, R2, U2 = Q2, np.zeros((0, 0), dtype=np.complex128), np.zeros((0, 0), dtype=np.complex128)
        Qc = np.concatenate([Q1 * phases[None], Q2c], axis=1)
        return cls(Q=Qc, phases=phases, c=c, U2=U2, P1=P1, R2=R2)

    def rotation(self, W: np.ndarray) -> np.ndarray:
        """W_c (d, d), skew-Hermitian: the first-order change δQ_c = Q_c W_c of the canonical basis under the
        rotation Q' = Q(I + W) of LAPACK's (``schur_tangent``: W_ii = 0, the zero block frozen). W_c = DᴴWD
        plus diag(iθ) on the non-zero modes (θ_j = −Im(φ_j (cᵀW)_j)/|c_j| keeps ωᵀq_j real) and, on the zero
        block, δU = the Q-factor derivative of its projected Ω₂: with M = −U₂ᴴW₂₁P₁R₂⁻¹, δU = L − Lᴴ + i·Im diag M
        (L the strictly lower part of M)."""
        d = W.shape[0]
        r = len(self.phases)
        Wc = np.empty_like(W, dtype=np.complex128)
        ph = self.phases
        Wc[:r, :r] = np.conj(ph)[:, None] * W[:r, :r] * ph[None]
        theta = -np.imag(ph * (self.c @ W[:, :r])) / np.where(np.abs(self.c[:r]) > 0, np.abs(self.c[:r]), 1.0)
        Wc[np.arange(r), np.arange(r)] += 1j * theta
        if r < d:
            W21 = W[r:, :r]
            Wc[r:, :r] = self.U2.conj().T @ W21 * ph[None]
            Wc[:r, r:] = -Wc[r:, :r].conj().T
            M = scipy.linalg.solve_triangular(self.R2.T, (-(self.U2.conj().T @ W21) @ self.P1).T, lower=True).T
            L = np.tril(M, -1)
            Wc[r:, r:] = L - L.conj().T + 1j * np.diag(np.imag(np.diagonal(M)))
        return Wc


# ---- first-order perturbation of the Schur form ------------------------------------------------------
def triangular_sylvester(A: np.ndarray, B: np.ndarray, C: np.ndarray, block: int = 48) -> np.ndarray:
    """X with A X − X B = C for upper-triangular A (m, m), B (n, n) and C (K, m, n): recursive halving (Jonsson &
    Kågström's RECSY) with LAPACK ztrsyl on blocks of at most `block`, matrix products for the couplings."""
    K, m, n = C.shape
    if m <= block and n <= block:
        out = np.empty_like(C)
        for k in range(K):
            X, scale, info = ztrsyl(A, B, C[k], isgn=-1)
            if info < 0:
                raise RuntimeError(f"LAPACK ztrsyl failed (info={info})")
            out[k] = X / scale
        return out
    if m >= n:  # split the rows: A22 X2 − X2 B = C2, then A11 X1 − X1 B = C1 − A12 X2
        h = m // 2
        X2 = triangular_sylvester(A[h:, h:], B, C[:, h:], block)
        X1 = triangular_sylvester(A[:h, :h], B, C[:, :h] - A[:h, h:] @ X2, block)
        return np.concatenate([X1, X2], axis=1)
    h = n // 2  # split the columns: A X1 − X1 B11 = C1, then A X2 − X2 B22 = C2 + X1 B12
    X1 = triangular_sylvester(A, B[:h, :h], C[:, :, :h], block)
    X2 = triangular_sylvester(A, B[h:, h:], C[:, :, h:] + X1 @ B[:h, h:], block)
    return np.concatenate([X1, X2], axis=2)


def schur_rotation(T: np.ndarray, E: np.ndarray, block: int = 48) -> np.ndarray:
    """Strictly lower W (K, n, n) with tril(T W − W T + E, −1) = 0 for upper-triangular T (n, n), E (K, n, n).

    Blockwise: T22 W21 − W21 T11 = −E21 (a triangular Sylvester equation), then the diagonal blocks with
    E11 + T12 W21 and E22 − W21 T12 (the strictly lower equations involve only strictly lower W).
    """
    K, n, _ = E.shape
    W = np.zeros_like(E)
    if n <= 1:
        return W
    if n <= block:
        lam = np.diag(T)
        for j in range(n - 1):  # column j from the columns before it
            rhs = -E[:, j + 1 :, j] + W[:, j + 1 :, :j] @ T[:j, j]  # (K, n-j-1)
            A = T[j + 1 :, j + 1 :] - lam[j] * np.eye(n - j - 1)
            W[:, j + 1 :, j] = scipy.linalg.solve_triangular(A, rhs.T).T
        return W
    h = n // 2
    T11, T12, T22 = T[:h, :h], T[:h, h:], T[h:, h:]
    W21 = triangular_sylvester(T22, T11, -E[:, h:, :h], block)
    W[:, h:, :h] = W21
    W[:, :h, :h] = schur_rotation(T11, E[:, :h, :h] + T12 @ W21, block)
    W[:, h:, h:] = schur_rotation(T22, E[:, h:, h:] - W21 @ T12, block)
    return W


@dataclass
class SchurTangent:
    """First-order change of the Schur form under J -> J + Δ_k, K directions (fixed eigenvalue order)."""

    W: np.ndarray | None  # (K, d, d) complex64 skew-Hermitian: Q' = Q (I + W) (kept only when asked)
    dlam: np.ndarray  # (K, d)
    dJ0: np.ndarray  # (K, d, d) complex64: δ(Q Λ Qᴴ)
    dnorm_rel: np.ndarray  # (K,) δ‖N‖_F / ‖N‖_F
    dRr: np.ndarray | None = None  # (K, d, d) complex64: δR' of the random control (``control_tangent``)


def schur_tangent(form: SchurForm, J: np.ndarray, deltas: np.ndarray, keep_rotation: bool = True) -> SchurTangent:
    """δJ₀ = Q(WΛ − ΛW + diag(E + TW − WT))Qᴴ for each deviation Δ_k (K, d, d), E = QᴴΔQ.

    W solves the triangular Sylvester system of ``schur_rotation`` in the leading (non-zero) block and its
    coupling to the zero block; rotations inside the numerically zero block are frozen (W22 = 0, δλ = 0 there).
    One direction at a time (memory: a few complex d×d matrices besides the K results); the basis changes in
    complex64, the precision of a tangent.
    """
    Q, lam = form.Q, form.lam
    d = len(lam)
    r = d if form.n_nonzero is None else form.n_nonzero
    T = np.diag(lam) + form.N
    Q64 = Q.astype(np.complex64)
    Qh64 = Q64.conj().T
    K = len(deltas)
    dJ0 = np.empty((K, d, d), dtype=np.complex64)
    Ws = np.empty((K, d, d), dtype=np.complex64) if keep_rotation else None
    dlam = np.zeros((K, d), dtype=np.complex128)
    for k in range(K):
        D32 = np.asarray(deltas[k], dtype=np.float32)
        E = (Qh64 @ (D32 @ Q64)).astype(np.complex128)[None]  # (1, d, d) QᴴΔQ
        W = np.zeros_like(E)
        if 0 < r < d:
            W21 = triangular_sylvester(T[r:, r:], T[:r, :r], -E[:, r:, :r])
            W[:, r:, :r] = W21
            W[:, :r, :r] = schur_rotation(T[:r, :r], E[:, :r, :r] + T[:r, r:] @ W21)
        elif r == d:
            W = schur_rotation(T, E)
        W = W[0] - W[0].conj().T  # skew-Hermitian, zero diagonal
        # δλ_i = (E + TW − WT)_ii = E_ii + Σ_j (T_ij W_ji − W_ij T_ji): O(d²)
        dl = np.diagonal(E[0]) + np.einsum("ij,ji->i", T, W) - np.einsum("ij,ji->i", W, T)
        dl[r:] = 0
        dlam[k] = dl
        inner = W * lam[None, :] - lam[:, None] * W
        inner[np.arange(d), np.arange(d)] += dl
        dJ0[k] = Q64 @ inner.astype(np.complex64) @ Qh64
        if Ws is not None:
            Ws[k] = W
    nn2 = float(np.sum(np.abs(form.N) ** 2))
    Jr = np.asarray(J, dtype=np.float64).real
    dfro2 = np.array([2 * float(np.sum(Jr * np.asarray(deltas[k], dtype=np.float64))) for k in range(K)])
    dn2 = dfro2 - 2 * np.real(np.sum(np.conj(lam)[None] * dlam, axis=1))
    return SchurTangent(W=Ws, dlam=dlam, dJ0=dJ0, dnorm_rel=dn2 / (2 * nn2) if nn2 > 0 else np.zeros(K))
