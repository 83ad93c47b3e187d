"""The settings of the Jacobian job, importable without torch (the workflow reads them to build its DAG)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

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
