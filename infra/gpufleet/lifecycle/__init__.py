"""The end of a cluster's life: `gpufleet destroy` (issue 23 item 3).

Why its own package: destroy crosses every layer below it (the pool, the cloud's state, the
storage, the simulated world, the rollout journal), so it sits with day two, above them all.
`destroy_plan` is the pure part (what exists -> the ordered steps, the journal's fold, the change
set); the adapters are thin (`fsx`, `pulumi_teardown`, `sim_world`, `pool_side`); `destroy_run`
walks the steps, journaling each; `destroy_command` is the CLI.
"""
