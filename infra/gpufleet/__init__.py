"""gpufleet: a GPU cluster from a stack file to a verified scheduling pool."""

__version__ = "0.1.0"
