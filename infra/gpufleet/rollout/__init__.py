"""The staged, gated rollout: a pure state machine, its journal, and the orchestrator that drives
the ports (`gpufleet.ports`: Provisioner, Executor, Clock; the Pool lives in `gpufleet.pool.protocol`)."""
