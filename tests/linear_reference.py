"""The linearised replicates' eigenvalues as they were before the one-product restructuring (layergeom.spectral
.linear at e6cb3a0), the reference tests/test_replicates.py compares the library with: per replicate the whole
complex r'×r' matrix A = Yᴴ Δ X / yᴴx, its diagonal as the first order, its entries in the 2×2 blocks, and the
complex pairs' a from a sum over conj(Δ x). Only what changed is overridden; the singular-value part is the
library's (the old float32 U, promoted to float64 in every product, equals today's float64-held rounding).
"""

from __future__ import annotations

import numpy as np
import torch

from layergeom.spectral import linear
from layergeom.spectral.spectra import numerical_rank, sr_dimension


class FullProductEigen(linear.EigenTangents):
    def tangent(self, delta32: np.ndarray) -> np.ndarray:
        return delta32  # the old `perturbed` took Δ itself

    def coupling(self, A: np.ndarray, p: int, q: int) -> complex:
        return A[p, q]  # the 2×2 blocks read the whole matrix

    def perturbed(self, delta32: np.ndarray) -> np.ndarray:
        lam = self.lam
        r = int(self.upper.sum())
        # the float32 product through torch's GEMM, as the library's (another BLAS rounds float32 sums otherwise)
        DX = (torch.as_tensor(np.asarray(delta32)) @ torch.from_numpy(self.x32)).numpy().astype(np.float64)
        DXc = DX[:, :r] + 1j * DX[:, r:]  # (d, r') Δ x_i
        A = (self.yc.T @ DXc) / self.ydotx[:, None]  # (r', r') a_pq
        new = lam[self.upper] + np.diagonal(A)
        full = np.zeros(len(lam), dtype=np.complex128)
        full[self.upper] = new
        lower = self.nz & (lam.imag < 0)
        idx = np.flatnonzero(lower)
        full[idx] = np.conj(full[idx - 1])
        pos = np.flatnonzero(self.upper)
        for i, j, e in self.real_pair_collisions(A, new):
            full[pos[i]], full[pos[j]] = e
        pair = np.flatnonzero((lam[self.upper].imag > 0) & np.isin(pos + 1, idx))
        a = np.sum(self.yc[:, pair] * np.conj(DXc[:, pair]), axis=0) / self.ydotx[pair]  # (pairs,)
        disc = np.abs(a) ** 2 - new[pair].imag ** 2
        for p, dd in zip(pair[disc > 0], disc[disc > 0]):
            full[pos[p]], full[pos[p] + 1] = new[p].real + np.sqrt(dd), new[p].real - np.sqrt(dd)
        return full[self.nz]


class FullProductSpectra(linear.LinearSpectra):
    def __post_init__(self):
        super().__post_init__()
        self.eigen = FullProductEigen.of(self.dec, self.tol)


def metric_replicates(J: np.ndarray, deltas: np.ndarray, *, tol: float, sr_k: int, dec) -> dict[str, np.ndarray]:
    """The linear method's replicates (``linear.metric_replicates`` with method="linear"), old eigenvalues."""
    sr_k = sr_dimension(sr_k, numerical_rank(dec.s, tol))
    lin = FullProductSpectra(np.asarray(J, np.float64), dec, tol, sr_k)
    rows = [lin.replicate(D) for D in deltas]
    return {m: np.array([r[m] for r in rows], dtype=np.float64) for m in rows[0]}
