"""Paper B: spectral geometry of the residual stream's sublayer Jacobians (docs/methods.md, "Paper B: spectra").

Modules: ``jacobians`` (exact per-sample Jacobians and their mean J̄_b), ``spectra`` (the per-boundary
metrics of J̄_b), ``cumulative`` (products of J̄_b through depth), ``schur`` (Schur surgery),
``pipeline`` (one function per workflow rule: the only module here that reads or writes files).
"""
