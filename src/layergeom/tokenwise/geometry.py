"""Per-anchor geometry of the decomposition h_{l+1}(a) = t + r, in the absolute and the delta convention."""

from __future__ import annotations

import numpy as np
import torch

from .fits import Fit

CONVENTIONS = ("delta", "absolute")
SUFFIX = {"delta": "_delta", "absolute": "_abs"}


def abs_cos(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Alignment |cos(a, b)| row by row (nan where a vector is zero)."""
    return signed_cos(a, b).abs()


def signed_cos(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """cos(a, b) row by row (nan where a vector is zero)."""
    den = a.norm(dim=1) * b.norm(dim=1)
    return torch.where(den > 0, (a * b).sum(1) / den, torch.nan)


def angle_deg(cos: torch.Tensor) -> torch.Tensor:
    """Angle in degrees between two lines from their alignment |cos| (0..90)."""
    return torch.rad2deg(torch.arccos(cos.clamp(-1.0, 1.0)))


def ratio(num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
    """num / den row by row, nan where den = 0 (a zero update: an identity or pruned block)."""
    return torch.where(den > 0, num / torch.where(den > 0, den, 1.0), torch.nan)


def energy_share(v: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Energy share ||v||^2 / ||u||^2."""
    n2 = (u * u).sum(1)
    return torch.where(n2 > 0, (v * v).sum(1) / n2, torch.nan)


def geometry(
    h: torch.Tensor,
    y: torch.Tensor,
    fit: Fit,
    ks: list[int],
    *,
    proj_k: int = 1,
    primary: str = "delta",
    hp: torch.Tensor | None = None,
    yp: torch.Tensor | None = None,
) -> dict[str, np.ndarray]:
    """Per-anchor columns for one class: alignment, angles, projection energies, energy shares, RelErr.

    h = h_l(a), y = h_{l+1}(a) (m, d); hp, yp their local coordinates (for subspaces held in them).
    Conventions: delta u = y - h, t - h; absolute u = y, t. The residual r = y - t is common to both.
    Columns of the ``primary`` convention carry no suffix, the other's end in ``_abs`` / ``_delta``.
    Projections pi_k on the top-k dominant directions for every k in ks, named ``proj_*_k{k}``;
    ``proj_full``, ``proj_tok``, ``proj_res`` are those at k = proj_k.
    """
    if primary not in CONVENTIONS:
        raise ValueError(f"primary convention must be one of {CONVENTIONS}, got {primary!r}")
    h, y, t = h.to(torch.float64), y.to(torch.float64), fit.t.to(torch.float64)
    r = y - t
    local = fit.tp is not None
    out: dict[str, torch.Tensor] = {
        "relerr": ratio(r.norm(dim=1), y.norm(dim=1)),
        "relerr_delta": ratio(r.norm(dim=1), (y - h).norm(dim=1)),
        "norm_res": r.norm(dim=1),
        "norm_update": (y - h).norm(dim=1),
        "norm_out": y.norm(dim=1),
    }
    for conv in CONVENTIONS:
        sfx = "" if conv == primary else SUFFIX[conv]
        if conv == "delta":
            u, tok, sub = y - h, t - h, fit.delta
            coords = (yp - hp, fit.tp - hp, yp - fit.tp) if local and hp is not None else (None,) * 3
        else:
            u, tok, sub = y, t, fit.absolute
            coords = (yp, fit.tp, yp - fit.tp) if local and yp is not None else (None,) * 3
        c_tok, c_res = signed_cos(u, tok), signed_cos(u, r)
        out[f"cos_full_tok{sfx}"] = c_tok.abs()
        out[f"cos_full_res{sfx}"] = c_res.abs()
        out[f"cos_full_tok_signed{sfx}"] = c_tok
        out[f"cos_full_res_signed{sfx}"] = c_res
        out[f"cos_tok_res{sfx}"] = abs_cos(tok, r)
        out[f"angle_tok_deg{sfx}"] = angle_deg(c_tok.abs())
        out[f"angle_res_deg{sfx}"] = angle_deg(c_res.abs())
        out[f"energy_tok{sfx}"] = energy_share(tok, u)
        out[f"energy_res{sfx}"] = energy_share(r, u)
        for name, v, vp in zip(("full", "tok", "res"), (u, tok, r), coords):
            e = sub.energy(v, vp, ks)  # (m, len(ks))
            for i, k in enumerate(ks):
                out[f"proj_{name}_k{k}{sfx}"] = e[:, i]
            out[f"proj_{name}{sfx}"] = e[:, ks.index(proj_k)]
    return {key: v.detach().cpu().numpy() for key, v in out.items()}
