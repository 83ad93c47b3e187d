"""Paper B's spectral stages as workflow jobs: one module per stage, each holding its rules' functions (the one
job, its parts, its gather and its resume key) and nothing else; with ``trends.write_trends``, all of
``layergeom.spectral`` that reads or writes files. The formulas stay in the method modules beside this package.

``jacobians`` (``spectra_jacobians_<model>``), ``table`` (``spectra_table``, ``_part``, ``_gather``),
``cumulative`` (``spectra_cumulative``, ``_variant``, ``_gather``), ``schur`` (``spectra_schur``, ``_prep``,
``_chain``, ``_gather``), ``convergence`` (``spectra_convergence``, ``_subset``, ``_gather``), and ``common``:
what several share (``BoundaryFiles``, the replicates, the snapshots, the part jobs' work folders).
"""
