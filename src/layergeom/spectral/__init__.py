"""Paper B: spectral geometry of the residual stream's sublayer Jacobians (docs/methods.md, "Paper B: spectra").

Modules, each importing only those before it (tests/test_spectral_imports.py): ``settings`` (the Jacobian
job's settings and the Schur surgery's chains, without torch or numpy), ``structured`` and ``jacobians`` (exact per-sample Jacobians and their mean
J̄_b; torch), ``intervals`` (the jackknife core), ``spectra`` (the per-boundary metrics of J̄_b), ``linear``
(their linearised jackknife replicates), ``cumulative`` (products of J̄_b through depth, with the replicates'
tangents), ``schur_basis`` (the Schur form in its orders, the control's basis, their tangents), ``schur``
(Schur surgery), ``convergence``, ``trends`` (with its rule's entry point) and the package ``jobs`` (one module
per stage with its workflow rules' functions: with ``trends.write_trends``, all that reads or writes files).
"""
