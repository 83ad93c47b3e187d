"""layergeom: geometry and dynamics of layer updates in language models (Papers A and B)."""

__version__ = "0.1.0"
