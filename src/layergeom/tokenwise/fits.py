"""Restricted map classes T fitted on each anchor's neighbourhood, all anchors of a layer at once.

Inputs: the neighbourhood inputs X (m, k, d) = h_l(N(a)), outputs Y (m, k, d) = h_{l+1}(N(a)) and the
anchors' inputs xa (m, d). Each class returns a :class:`Fit`: the tokenwise prediction t = T(h_l(a)) and
the dominant tokenwise directions in both conventions (absolute: left singular vectors of A; delta: of
A - I; for ``mlp`` of the neighbourhood's tokenwise outputs / updates).

Every class except ``diag`` and ``global`` is equivariant under rotations and acts on the neighbourhood
only through span(X, Y) (dim p <= 2k < d): it is fitted in the coordinates of an orthonormal basis of that
span (one batched Householder QR per layer), in float64, never with d x d matrices per anchor. Off the
span the map is the identity (classes containing I) or zero (``lowrank_form: pure``).
Maps act on column vectors (y = A x); with rows stacked, Y = X Aᵀ.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np
import torch

from ..linalg import torch_svd
from . import CLASSES

RTOL = 1e-9  # singular values below RTOL * largest count as zero (float64 fits)
GRAM_RTOL = 1e-6  # the same from the eigenvalues of a Gram matrix (which square the condition number)
TIE = 1e-6  # a direction is dominant only if its singular value exceeds the complement's by this fraction


# ---- batched LAPACK ------------------------------------------------------------------------------
@contextlib.contextmanager
def serial():
    """Run batched small-matrix work on one thread. On CPU, MKL/OpenMP over many small matrices gains nothing
    from a second thread (batched eigh/SVD of 64x64 matrices: 1 thread 0.28/0.53 s, 2 threads 0.38/0.82 s per
    512), and with OpenMP's default spin-waiting on a shared machine it is 10-100x slower (24 s)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)


def eigh(A):
    with serial():
        return torch.linalg.eigh(A)


def svd(A):
    with serial():
        return torch_svd(A)


def solve_spd(A, B):
    """Solve A X = B for symmetric positive definite A (batched Cholesky)."""
    with serial():
        return torch.cholesky_solve(B, torch.linalg.cholesky(A))


def qr(A):
    with serial():
        return torch.linalg.qr(A).Q


def thin_svd(X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Thin SVD X = U diag(s) Vᵀ of a batch of wide matrices X (m, k, d), k <= d, from the k x k Gram matrix.

    Returns U (m, k, k), s (m, k) descending and V (m, d, k); columns for zero singular values are zero.
    """
    ev, U = eigh(X @ X.mT)  # ascending
    ev, U = ev.flip(1).clamp_min(0), U.flip(2)
    s = ev.sqrt()  # (m, k)
    inv = torch.where(s > GRAM_RTOL * s[:, :1], 1.0 / s, 0.0)
    return U, torch.where(inv > 0, s, 0.0), (X.mT @ U) * inv[:, None, :]


# ---- local coordinates ----------------------------------------------------------------------------
@dataclass
class Local:
    """The neighbourhoods in an orthonormal basis Q (m, d, p) of span(X rows, Y rows), p = min(d, 2k).

    Q is held as Householder reflectors (``torch.geqrf``); X, Y (m, k, p) and xa (m, p) are coordinates.
    """

    X: torch.Tensor
    Y: torch.Tensor
    xa: torch.Tensor
    d: int
    reflectors: torch.Tensor  # (m, d, 2k)
    tau: torch.Tensor  # (m, p)

    @property
    def p(self) -> int:
        return self.X.shape[2]

    def to_coords(self, v: torch.Tensor) -> torch.Tensor:
        """Coordinates Qᵀ v (m, p) of vectors v (m, d) (their component in the span)."""
        with serial():
            full = torch.ormqr(self.reflectors, self.tau, v.to(torch.float64)[:, :, None], transpose=True)
        return full[:, : self.p, 0]

    def to_d(self, vp: torch.Tensor) -> torch.Tensor:
        """Vectors Q vp (m, d) from coordinates vp (m, p)."""
        pad = vp.new_zeros(vp.shape[0], self.d, 1)
        pad[:, : self.p, 0] = vp
        with serial():
            return torch.ormqr(self.reflectors, self.tau, pad)[:, :, 0]


def localise(X: torch.Tensor, Y: torch.Tensor, xa: torch.Tensor) -> Local:
    """Coordinates of a layer's neighbourhoods in span(X, Y): one batched QR of [Xᵀ Yᵀ] (m, d, 2k)."""
    m, k, d = X.shape
    M = torch.cat([X, Y], 1).mT.to(torch.float64)  # (m, d, 2k)
    with serial():
        a, tau = torch.geqrf(M)
    p = min(d, 2 * k)
    R = torch.triu(a[:, :p, :])  # (m, p, 2k): Mᵀ = Q R, so the rows of M have coordinates Rᵀ
    loc = Local(X=R[:, :, :k].mT, Y=R[:, :, k:].mT, xa=None, d=d, reflectors=a, tau=tau)
    loc.xa = loc.to_coords(xa)
    return loc


# ---- dominant directions ------------------------------------------------------------------------
@dataclass
class Subspace:
    """Dominant tokenwise directions of each anchor's map, sorted by singular value.

    ``vecs`` (m, n, q) orthonormal columns, in local coordinates (n = p) or in R^d (n = d), or ``axes``
    (m, q) coordinate axes of R^d; ``sv`` (m, q) their singular values; ``floor`` the singular value of the
    implicit complement (the map is floor x an isometry there). A direction counts if its singular value
    is > 0 and above the floor; beyond the map's rank the subspace saturates, and where the k-th
    direction would tie with a non-zero complement the projection is undefined (nan).
    """

    sv: torch.Tensor
    floor: float = 0.0
    vecs: torch.Tensor | None = None
    axes: torch.Tensor | None = None
    local: bool = True

    @classmethod
    def empty(cls, m: int, floor: float) -> Subspace:
        """A map with no dominant direction (the identity, or zero)."""
        return cls(sv=torch.zeros(m, 0, dtype=torch.float64), floor=floor, axes=torch.zeros(m, 0, dtype=torch.long))

    def energy(self, v: torch.Tensor, vp: torch.Tensor | None, ks: list[int]) -> torch.Tensor:
        """Projection energy pi_k(v) = ||P_k v||^2 / ||v||^2 on the top-k directions; (m, len(ks)).

        v (m, d) in R^d, vp (m, p) its local coordinates (needed for subspaces held in coordinates).
        """
        v = v.to(torch.float64)
        m = v.shape[0]
        sv = self.sv.to(torch.float64).expand(m, -1)
        out = torch.full((m, len(ks)), float("nan"), dtype=torch.float64, device=v.device)
        if sv.shape[1] == 0:
            return out
        if self.axes is not None:
            coef = torch.gather(v, 1, self.axes.expand(m, -1))
        else:
            coef = torch.einsum("mnq,mn->mq", self.vecs.expand(m, -1, -1), vp if self.local else v)
        thr = torch.clamp(sv[:, :1] * RTOL, min=self.floor * (1 + TIE))
        valid = sv > thr  # (m, q), a prefix since sv is sorted
        n_valid = valid.sum(1)  # (m,)
        cum = torch.cumsum(coef**2 * valid, 1)  # (m, q)
        cum0 = torch.cat([torch.zeros_like(cum[:, :1]), cum], 1)  # (m, q+1), cum0[:, i] = sum of the first i
        # tied singular values form clusters; a cut through a cluster takes its energy pro rata (the mean
        # over the tied directions' choices), e.g. the rotation planes of an orthogonal map (sv in pairs)
        pos = torch.arange(sv.shape[1], device=sv.device).expand(m, -1)
        new = torch.ones_like(valid)
        new[:, 1:] = (sv[:, :-1] - sv[:, 1:]) > TIE * sv[:, :1]
        start = torch.cummax(torch.where(new, pos, 0), 1).values  # first index of each position's cluster
        end = torch.flip(torch.cummin(torch.flip(torch.where(new, pos, sv.shape[1]), [1]), 1).values, [1])
        end = torch.cat([end[:, 1:], torch.full_like(end[:, :1], sv.shape[1])], 1)  # one past the cluster
        end = torch.minimum(end, n_valid[:, None])
        norm2 = (v * v).sum(1)
        for i, k in enumerate(ks):
            cut = n_valid.clamp(max=k, min=1)  # (m,) directions taken
            s0 = torch.gather(start, 1, (cut - 1)[:, None])[:, 0]
            e0 = torch.gather(end, 1, (cut - 1)[:, None])[:, 0].clamp(min=1)
            lo, hi = torch.gather(cum0, 1, s0[:, None])[:, 0], torch.gather(cum0, 1, e0[:, None])[:, 0]
            e = (lo + (cut - s0) / (e0 - s0).clamp(min=1) * (hi - lo)) / norm2
            undefined = (n_valid == 0) | ((n_valid < k) & (self.floor > 0)) | (norm2 == 0)
            out[:, i] = torch.where(undefined, torch.nan, e)
        return out


def directions_plus_lowrank(c: float, L: torch.Tensor, R: torch.Tensor, q: int) -> Subspace:
    """Left singular directions of A = c I + L Rᵀ (L, R (m, n, r)), exactly, in the span of [L, R]."""
    E = qr(torch.cat([L, R], 2))  # (m, n, s) orthonormal, A = c (I - E Eᵀ) + E B Eᵀ
    B = (E.mT @ L) @ (R.mT @ E) + c * torch.eye(E.shape[2], dtype=E.dtype, device=E.device)  # (m, s, s)
    U, S, _ = svd(B)
    q = min(q, S.shape[1])
    return Subspace(sv=S[:, :q], floor=abs(c), vecs=E @ U[:, :, :q])


def row_space_directions(M: torch.Tensor, q: int) -> Subspace:
    """Top right singular vectors of the rows of M (m, k, n): the dominant directions of a sample."""
    _, s, V = thin_svd(M)
    q = min(q, s.shape[1])
    return Subspace(sv=s[:, :q], floor=0.0, vecs=V[:, :, :q])


# ---- fits ---------------------------------------------------------------------------------------
@dataclass
class Fit:
    """One class fitted on every anchor: the tokenwise prediction and its dominant directions."""

    t: torch.Tensor  # (m, d) tokenwise prediction T(h_l(a)), float64
    delta: Subspace  # directions of A - I (or of the tokenwise updates)
    absolute: Subspace  # directions of A (or of the tokenwise outputs)
    tp: torch.Tensor | None = None  # (m, p) local coordinates of t, for classes fitted in coordinates


def _local_fit(loc: Local, xa: torch.Tensor, tp: torch.Tensor, off: float, delta, absolute) -> Fit:
    """t = off * xa + Q (tp - off * xa_p): the fitted map in the span, off * identity on its complement."""
    t = loc.to_d(tp - off * loc.xa) + off * xa.to(torch.float64)
    return Fit(t=t, delta=delta, absolute=absolute, tp=tp)


def ridge_lambda(X: torch.Tensor, ridge: float, d: int) -> torch.Tensor:
    """Ridge lambda = ridge * mean diag(XᵀX) = ridge * ||X||_F^2 / d, per batch element of X (..., k, n)."""
    return ridge * (X * X).sum((-2, -1)) / d


def fit_identity(xa: torch.Tensor) -> Fit:
    """Control: T(x) = x."""
    m = xa.shape[0]
    return Fit(t=xa.to(torch.float64), delta=Subspace.empty(m, 0.0), absolute=Subspace.empty(m, 1.0))


def fit_diag(X, Y, xa, *, q: int = 8) -> Fit:
    """Diagonal map A = diag(a), a_i = max(0, sum_j x_ji y_ji / sum_j x_ji^2) (per-coordinate least squares)."""
    num, den = (X * Y).sum(1).double(), (X * X).sum(1).double()  # (m, d), in the inputs' precision
    xa = xa.to(torch.float64)
    a = torch.where(den > 0, num / den.clamp_min(torch.finfo(den.dtype).tiny), 1.0).clamp_min(0.0)
    q = min(q, a.shape[1])
    sv_d, ax_d = torch.topk((a - 1).abs(), q, dim=1)
    sv_a, ax_a = torch.topk(a, q, dim=1)
    return Fit(t=a * xa, delta=Subspace(sv=sv_d, axes=ax_d), absolute=Subspace(sv=sv_a, axes=ax_a))


def lowrank_rank(rank: int, k: int, d: int) -> int:
    """The rank the lowrank class can have: r capped by the k neighbours and the local dimension p = min(d, 2k)."""
    return min(int(rank), int(k), min(int(d), 2 * int(k)))


def fit_lowrank(loc: Local, xa, *, rank: int, form: str, ridge: float, q: int = 8) -> Fit:
    """Reduced-rank ridge regression: min ||D - X B||^2 + lam ||B||^2 s.t. rank(B) <= r.

    D = Y - X (``identity_plus``: A = I + Bᵀ) or D = Y (``pure``: A = Bᵀ). Exact solution (Mukherjee &
    Zhu 2011): B_r = B V_r V_rᵀ with B the ridge solution and V_r the top-r right singular vectors of the
    augmented fit [X B; sqrt(lam) B]; computed in the dual (k x k) form.
    """
    if form not in ("identity_plus", "pure"):
        raise ValueError(f"lowrank_form must be identity_plus or pure, got {form!r}")
    X, Y = loc.X, loc.Y  # (m, k, p)
    m, k, p = X.shape
    D = Y - X if form == "identity_plus" else Y
    lam = ridge_lambda(X, ridge, loc.d)  # (m,)
    ev, W = eigh(X @ X.mT)  # G = X Xᵀ = W diag(ev) Wᵀ, (m, k), (m, k, k)
    ev = ev.clamp_min(0)
    shifted = ev + lam[:, None]
    inv = torch.where(shifted > GRAM_RTOL**2 * shifted[:, -1:], 1.0 / shifted, 0.0)  # pseudo-inverse if lam = 0
    WtD = W.mT @ D  # (m, k, p)
    C = W @ (inv[:, :, None] * WtD)  # (G + lam I)^-1 D, so B = Xᵀ C (the minimum-norm solution if lam = 0)
    # [X B; sqrt(lam) B]ᵀ[X B; sqrt(lam) B] = Cᵀ G (G + lam I) C = Hᵀ H with H = (G (G + lam I))^(1/2) C
    H = W @ ((ev * shifted).sqrt()[:, :, None] * inv[:, :, None] * WtD)  # (m, k, p)
    Vr = row_space_directions(H, lowrank_rank(rank, k, p)).vecs  # (m, p, r); zero columns beyond the rank
    Z = X.mT @ (C @ Vr)  # (m, p, r) = B V_r, so A - off I = Bᵣᵀ = V_r Zᵀ
    update = (Vr @ (Z.mT @ loc.xa[:, :, None]))[:, :, 0]  # (m, p) = Bᵣᵀ xa
    if form == "identity_plus":
        return _local_fit(
            loc,
            xa,
            loc.xa + update,
            1.0,
            directions_plus_lowrank(0.0, Vr, Z, q),
            directions_plus_lowrank(1.0, Vr, Z, q),
        )
    return _local_fit(
        loc, xa, update, 0.0, directions_plus_lowrank(-1.0, Vr, Z, q), directions_plus_lowrank(0.0, Vr, Z, q)
    )


def fit_orthogonal(loc: Local, xa, *, q: int = 8) -> Fit:
    """Orthogonal Procrustes A = U Vᵀ from the SVD of YᵀX; where YᵀX is rank-deficient (k < d), the minimiser
    closest to I, which is the identity on the complement of the neighbourhood's span.

    With U1 Σ V1ᵀ the non-zero part of YᵀX, A = U1 V1ᵀ on span(V1); on the rest of span(V1, U1) the nearest
    orthogonal completion is the direct rotation of each pair of principal vectors (v_i, u_i) of the two
    spans: it maps ṽ_i = (u_i - c_i v_i)/s_i to -ũ_i = -(v_i - c_i u_i)/s_i; it is the identity elsewhere.
    """
    X, Y = loc.X, loc.Y  # (m, k, p)
    m, k, p = X.shape
    kx = min(k, p)
    # the QR basis starts with span(X): X's coordinates fill the first kx columns, YᵀX = (Yᵀ Xc) [I 0]
    Xc = X[:, :, :kx]  # (m, k, kx)
    U, S, Vch = svd(Y.mT @ Xc)  # (m, p, kx), (m, kx), (m, kx, kx): thin SVD of YᵀXc
    keep = (S > 1e-9 * S[:, :1]).to(X.dtype)  # (m, kx) non-zero singular values of YᵀX
    U1 = U * keep[:, None, :]  # (m, p, kx)
    V1 = torch.cat([Vch.mT, X.new_zeros(m, p - kx, kx)], 1) * keep[:, None, :]
    # principal vectors of span(V1) and span(U1); dropped columns are parked at singular value 2
    P, c, Rh = svd(V1.mT @ U1 + torch.diag_embed(2.0 * (1 - keep)))
    pair = (c <= 1.5).to(X.dtype)
    c = c.clamp(max=1.0) * pair
    v, u = V1 @ P, U1 @ Rh.mT  # (m, p, k)
    s = (1 - c * c).clamp_min(0).sqrt()
    rot = pair * (s > 1e-6)  # pairs that rotate (the others are common directions)
    inv = torch.where(rot > 0, 1.0 / s.clamp_min(1e-300), 0.0)[:, None, :]
    vt = (u - c[:, None, :] * v) * inv  # ṽ (m, p, k), orthogonal to span(V1)
    ut = (v - c[:, None, :] * u) * inv  # ũ, orthogonal to span(U1)
    # A - I = (U1 - V1) V1ᵀ - (ũ + ṽ) ṽᵀ = L Eᵀ with E = [V1, ṽ] orthonormal
    L = torch.cat([U1 - V1, -(ut + vt)], 2)  # (m, p, 2k)
    E = torch.cat([V1, vt], 2)
    tp = loc.xa + (L @ (E.mT @ loc.xa[:, :, None]))[:, :, 0]
    # (A - I)(A - I)ᵀ = L Lᵀ, so the left singular vectors of A - I are those of L; A itself has all sv = 1
    return _local_fit(loc, xa, tp, 1.0, row_space_directions(L.mT, q), Subspace.empty(m, 1.0))


# ---- mlp ----------------------------------------------------------------------------------------
class Adam:
    """Adam (Kingma & Ba) with the usual defaults, elementwise, so a batch of anchors trains independently.

    Written out (a few tensor ops) because ``torch.optim`` imports torch._dynamo on first use (seconds).
    """

    def __init__(self, params, lr, betas=(0.9, 0.999), eps=1e-8):
        self.params, self.lr, self.betas, self.eps, self.t = params, lr, betas, eps, 0
        self.m = [torch.zeros_like(p) for p in params]
        self.v = [torch.zeros_like(p) for p in params]

    def select(self, params, rows):
        """Continue with a subset of the batch (rows of every tensor)."""
        self.params = params
        self.m = [m[rows] for m in self.m]
        self.v = [v[rows] for v in self.v]

    @torch.no_grad()
    def step(self, grads):
        self.t += 1
        b1, b2 = self.betas
        c1, c2 = 1 - b1**self.t, 1 - b2**self.t
        for p, g, m, v in zip(self.params, grads, self.m, self.v):
            m.mul_(b1).add_(g, alpha=1 - b1)
            v.mul_(b2).addcmul_(g, g, value=1 - b2)
            p.addcdiv_(m, (v / c2).sqrt_().add_(self.eps), value=-self.lr / c1)


def _split(seeds: np.ndarray, k: int, device) -> torch.Tensor:
    """A seeded permutation (m, k) of the k neighbours per anchor (validation rows first)."""
    return torch.stack([torch.randperm(k, generator=torch.Generator().manual_seed(int(s))) for s in seeds]).to(device)


def _span(Z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Orthonormal basis (m, p, n) of the rows of Z (m, n, p) (zero columns beyond the rank) and the RMS
    coordinate scale (m,)."""
    _, s, Q = thin_svd(Z)
    scale = ((Z * Z).sum((1, 2)) / (s > 0).sum(1).clamp_min(1) / Z.shape[1]).sqrt().clamp_min(1e-30)
    return Q, scale


def mlp_net(z: torch.Tensor, P: list[torch.Tensor]) -> torch.Tensor:
    """W2 GELU(W1 z + b1) + b2 for a batch of networks: z (m, n, nin) -> (m, n, nout)."""
    return torch.nn.functional.gelu(z @ P[0].mT + P[1]) @ P[2] + P[3]


def train_early_stopping(params, zt, gt, zv, gv, *, steps: int, lr: float, patience: int, compact: float = 0.75):
    """Full-batch Adam on each network's own mean squared error; returns each network's parameters at its
    lowest validation loss, stopping a network after `patience` steps without improvement.

    Networks that have stopped leave the batch once the live ones drop below `compact` of it, so the cost
    follows the total number of steps taken rather than batch size x the slowest network.
    """
    m = zt.shape[0]
    idx = torch.arange(m, device=zt.device)  # the networks still in the working batch
    P = [p.clone().requires_grad_() for p in params]
    adam = Adam(P, lr)
    zs, gs = torch.cat([zt, zv], 1), torch.cat([gt, gv], 1)  # one forward serves the step and the validation
    n_train = zt.shape[1]
    best = [p.detach().clone() for p in params]
    best_loss = torch.full((m,), torch.inf, device=zt.device)
    since = torch.zeros(m, dtype=torch.long, device=zt.device)

    def keep_if_better(val):  # early-stopping bookkeeping for the working batch's current parameters
        better = (val < best_loss[idx]) & (since[idx] <= patience)
        for b, v in zip(best, P):
            b[idx] = torch.where(better.view(-1, 1, 1), v.detach(), b[idx])
        best_loss[idx] = torch.where(better, val, best_loss[idx])
        since[idx] = torch.where(better, 0, since[idx] + 1)

    for _ in range(steps):
        err = (mlp_net(zs, P) - gs) ** 2  # (mb, k, nout)
        keep_if_better(err[:, n_train:].detach().mean((1, 2)))
        live = since[idx] <= patience
        if not bool(live.any()):
            return best
        adam.step(torch.autograd.grad(err[:, :n_train].mean((1, 2)).sum(), P))
        if live.sum() < compact * len(idx):
            idx, zs, gs = idx[live], zs[live], gs[live]
            P = [p.detach()[live].requires_grad_() for p in P]
            adam.select(P, live)
    with torch.no_grad():
        keep_if_better(((mlp_net(zs[:, n_train:], P) - gs[:, n_train:]) ** 2).mean((1, 2)))
    return best


def fit_mlp(
    loc: Local,
    xa,
    *,
    width: int,
    steps: int,
    lr: float,
    patience: int,
    val_frac: float,
    seeds: np.ndarray | None = None,
    q: int = 8,
) -> Fit:
    """T(x) = x + W2 GELU(W1 x + b1) + b2 per anchor, trained with Adam (all anchors in one batch, each on its
    own loss) with early stopping on a held-out split of the neighbourhood.

    Plain gradient descent keeps W1 in the span of the (centred) training inputs and W2 in the span of the
    training updates; training runs in those coordinates (standardised, float32), i.e. with zero initial
    weight outside them. The network starts as the mean update of its training neighbours (W2 = 0).
    """
    X, D = loc.X, loc.Y - loc.X  # (m, k, p)
    m, k, p = X.shape
    seeds = np.arange(m) if seeds is None else np.asarray(seeds)
    n_val = max(1, int(round(val_frac * k)))
    if k - n_val < 2:
        raise ValueError(f"k={k} neighbours leave too few training rows for mlp_val_frac={val_frac}")
    perm = _split(seeds, k, X.device)  # (m, k)

    def rows(Z, idx):
        return torch.gather(Z, 1, idx[:, :, None].expand(-1, -1, p))

    Xv, Xt = rows(X, perm[:, :n_val]), rows(X, perm[:, n_val:])  # (m, n, p)
    Dv, Dt = rows(D, perm[:, :n_val]), rows(D, perm[:, n_val:])
    mx, md = Xt.mean(1, keepdim=True), Dt.mean(1, keepdim=True)  # (m, 1, p)
    Qx, sx = _span(Xt - mx)  # (m, p, n)
    Qd, sd = _span(Dt - md)

    def coords(Z, mean, Q, s):
        return (((Z - mean) @ Q) / s[:, None, None]).float()  # (m, n, n_train)

    zt, zv, gt, gv = coords(Xt, mx, Qx, sx), coords(Xv, mx, Qx, sx), coords(Dt, md, Qd, sd), coords(Dv, md, Qd, sd)
    nin, nout = Qx.shape[2], Qd.shape[2]
    W1 = torch.stack([torch.randn(width, nin, generator=torch.Generator().manual_seed(int(s) + 1)) for s in seeds])
    init = [
        W1.to(X.device) / np.sqrt(nin),  # (m, w, nin)
        torch.zeros(m, 1, width, device=X.device),
        torch.zeros(m, width, nout, device=X.device),
        torch.zeros(m, 1, nout, device=X.device),
    ]
    best = train_early_stopping(init, zt, gt, zv, gv, steps=steps, lr=lr, patience=patience)
    with torch.no_grad():

        def update(Z):  # tokenwise update in local coordinates (m, n, p)
            return md + sd[:, None, None] * (mlp_net(coords(Z, mx, Qx, sx), best).double() @ Qd.mT)

        tp = loc.xa + update(loc.xa[:, None, :])[:, 0]
        upd = update(X)  # (m, k, p), all neighbours
    return _local_fit(loc, xa, tp, 1.0, row_space_directions(upd, q), row_space_directions(X + upd, q))


# ---- global -------------------------------------------------------------------------------------
def fit_global(H0: torch.Tensor, H1: torch.Tensor, *, ridge: float) -> torch.Tensor:
    """One linear map for all tokens of a layer: A = I + Bᵀ, B = argmin ||(H1 - H0) - H0 B||^2 + lam ||B||^2."""
    H0, H1 = H0.to(torch.float64), H1.to(torch.float64)
    d = H0.shape[1]
    gram = H0.T @ H0  # (d, d)
    lam = ridge * torch.diagonal(gram).mean()
    B = solve_spd(gram + lam * torch.eye(d, dtype=gram.dtype, device=gram.device), H0.T @ (H1 - H0))  # (d, d)
    return torch.eye(d, dtype=B.dtype, device=B.device) + B.T


def apply_global(A: torch.Tensor, xa: torch.Tensor, *, q: int = 8) -> Fit:
    """The global map applied to the anchors, with its dominant directions (shared by all anchors)."""
    A, xa = A.to(torch.float64), xa.to(torch.float64)
    subs = []
    for M in (A - torch.eye(A.shape[0], dtype=A.dtype, device=A.device), A):
        U, S, _ = svd(M)
        subs.append(Subspace(sv=S[None, :q], vecs=U[None, :, :q], local=False))
    return Fit(t=xa @ A.T, delta=subs[0], absolute=subs[1])


# ---- all classes of a layer ---------------------------------------------------------------------
LOCAL = ("lowrank", "orthogonal", "mlp")


def fit_classes(
    classes, X, Y, xa, cfg: dict, *, q: int = 8, seeds: np.ndarray | None = None, global_map=None
) -> tuple[dict[str, Fit], Local | None]:
    """Fit the requested classes on every anchor; settings from the ``tokenwise`` config section.

    Returns the fits by class and the local coordinates (for projections of subspaces held in them).
    """
    unknown = set(classes) - set(CLASSES)
    if unknown:
        raise ValueError(f"unknown class(es) {sorted(unknown)}; known: {', '.join(CLASSES)}")
    with serial():  # many small batched ops: one thread is faster on CPU (see `serial`)
        return _fit_classes(classes, X, Y, xa, cfg, q=q, seeds=seeds, global_map=global_map)


def _fit_classes(classes, X, Y, xa, cfg, *, q, seeds, global_map):
    loc = localise(X, Y, xa) if set(classes) & set(LOCAL) else None
    out = {}
    for name in classes:
        if name == "identity":
            out[name] = fit_identity(xa)
        elif name == "diag":
            out[name] = fit_diag(X, Y, xa, q=q)
        elif name == "lowrank":
            out[name] = fit_lowrank(loc, xa, rank=cfg["rank"], form=cfg["lowrank_form"], ridge=cfg["ridge"], q=q)
        elif name == "orthogonal":
            out[name] = fit_orthogonal(loc, xa, q=q)
        elif name == "mlp":
            out[name] = fit_mlp(
                loc,
                xa,
                width=cfg["mlp_width"],
                steps=cfg["mlp_steps"],
                lr=cfg["mlp_lr"],
                patience=cfg["mlp_patience"],
                val_frac=cfg["mlp_val_frac"],
                seeds=seeds,
                q=q,
            )
        elif name == "global":
            if global_map is None:
                raise ValueError("the global class needs the layer's global map (fit_global)")
            out[name] = apply_global(global_map, xa, q=q)
    return out, loc
