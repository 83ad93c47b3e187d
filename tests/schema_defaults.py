"""The defaults of config/schema/*.yaml for tests that call library functions directly.

The library's functions take every setting the config holds as a required argument (the defaults live only
in the schemas); a test that means "the default" passes these, read from the schemas, so a changed default
is changed once.
"""

from __future__ import annotations

from pathlib import Path

import yaml

SCHEMA = Path(__file__).resolve().parents[1] / "config" / "schema"


def section_defaults(name: str) -> dict:
    """{key: default} of one schema's top-level properties (those with a default)."""
    schema = yaml.safe_load((SCHEMA / f"{name}.schema.yaml").read_text())
    return {k: v["default"] for k, v in schema["properties"].items() if "default" in v}


SPECTRA = section_defaults("spectra")
SEED = section_defaults("config")["seed"]


def tol(d: int, dtype: str | None = None) -> float:
    """The default rank tolerance τ of a d×d J̄ (``spectra.dtype``, ``spectra.rank_tol``; `dtype` overrides)."""
    from layergeom.spectral.spectra import rank_tolerance

    return rank_tolerance(d, dtype or SPECTRA["dtype"], SPECTRA["rank_tol"])


def jacobian_kw(**over) -> dict:
    """``jacobians.boundary_jacobian``'s / ``mean_jacobian``'s settings at their defaults (torch dtype)."""
    from layergeom.spectral.jacobians import DTYPES

    kw = {"chunk_size": SPECTRA["chunk_size"], "mode": SPECTRA["autodiff"],
          "spectral_norm": SPECTRA["sample_spectral_norm"], "dtype": DTYPES[SPECTRA["dtype"]]}  # fmt: skip
    return kw | over


def boundary_kw(**over) -> dict:
    """``jacobians.boundary_jacobian``'s keyword settings at their defaults."""
    return jacobian_kw(context=SPECTRA["context"], method=SPECTRA["method"]) | over


def schur_kw(**over) -> dict:
    """``schur.schur_surgery``'s settings at their defaults (besides the rank tolerance)."""
    kw = {"alphas": SPECTRA["alphas"], "seed": SEED, "sr_k": SPECTRA["sr_k"],
          "boundary_metrics": SPECTRA["schur_boundary_metrics"], "orders": SPECTRA["schur_orders"],
          "order_alphas": SPECTRA["schur_order_alphas"], "ci_level": SPECTRA["ci_level"],
          "ci_controls": SPECTRA["schur_ci_controls"]}  # fmt: skip
    return kw | over


def table_kw(*keys: str, **over) -> dict:
    """The given ``spectra`` settings at their defaults, for the job writers (``spectral.jobs``: ``write_spectra``...)."""
    return {k: SPECTRA[k] for k in keys} | over


# ---- the library's calls at the defaults (a keyword overrides) -------------------------------------------
def spectral_metrics(J, **kw) -> dict:
    """``spectra.spectral_metrics`` with ``spectra.sr_k`` and the default τ of J's size."""
    from layergeom.spectral.spectra import spectral_metrics as metrics

    return metrics(J, **({"sr_k": SPECTRA["sr_k"], "tol": tol(len(J))} | kw))


def schur_surgery(jacobians, **kw):
    """``schur.schur_surgery`` at the defaults (τ of the first J̄'s size); its α = 1 rows from the cumulative
    table of the same J̄ and replicates (``cumulative_rows``) unless `cumulative` is given."""
    import numpy as np

    from layergeom.spectral.cumulative import cumulative_rows
    from layergeom.spectral.schur import schur_surgery as surgery

    d = len(next(iter(jacobians.values())))
    kw = schur_kw(tol=tol(d)) | kw
    if "cumulative" not in kw:
        devs = kw.get("deviations")
        steps = ((n, np.asarray(J), None if devs is None else np.asarray(devs[n])) for n, J in jacobians.items())
        kw["cumulative"] = cumulative_rows(steps, weights=kw.get("weights"), ci_level=kw["ci_level"])
    return surgery(jacobians, **kw)
