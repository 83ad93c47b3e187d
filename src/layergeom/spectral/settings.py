"""The settings of the Jacobian job, importable without torch (the workflow reads them to build its DAG)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields


@dataclass(frozen=True)
class JacobianSettings:
    """The ``spectra`` keys the Jacobian job reads (defaults as in config/schema/spectra.schema.yaml)."""

    n_samples: int = 256
    samples: str | int | None = None
    n_groups: int = 16
    summary_samples: int = 64
    method: str = "auto"
    context: str = "isolated"
    chunk_size: int = 16
    autodiff: str = "rev"
    sample_spectral_norm: bool = False
    dtype: str = "float32"

    @classmethod
    def from_config(cls, spectra: dict) -> JacobianSettings:
        """The Jacobian keys of a ``spectra`` section (other keys are ignored)."""
        return cls(**{f.name: spectra[f.name] for f in fields(cls) if f.name in spectra})

    def as_dict(self) -> dict:
        return asdict(self)
