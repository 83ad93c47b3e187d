"""Paper B: topology of the residual stream and its coupling to the dynamics (docs/methods.md, "Paper B: topology").

Modules: ``graphs`` (streamed correlations, top-k signed graphs), ``communities`` (signed Leiden,
participation, boundary nodes), ``coupling`` (amplification, permutation Spearman, FDR),
``pipeline`` (one function per workflow rule: the only module here that reads or writes files).
"""
