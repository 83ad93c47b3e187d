"""Paper A: tokenwise decomposition of block updates (neighbourhood fits, geometry, functional KL, statistics).

Modules: ``neighbours`` (anchors and kNN), ``fits`` (the map classes, batched over anchors),
``geometry`` (alignment, angles, projection energies, RelErr), ``kl`` (patched-run KL),
``stats`` (Spearman with bootstrap CI), ``pipeline`` (one function per workflow rule).
Importing this package does not import torch; the torch-based modules load on first use.
"""

CLASSES = ("diag", "lowrank", "orthogonal", "mlp", "identity", "global")
