"""gpufleet's CrossGuard policy pack. `rules` is importable without starting the pack."""
