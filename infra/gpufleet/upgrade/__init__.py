"""Grey upgrades of a live pool: `gpufleet upgrade` (plan, journaled state, orchestrator, command)."""
