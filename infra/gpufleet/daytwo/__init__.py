"""Day two on a live pool: the blacklist lifecycle (blacklist, clear, replace), the patrol of idle
nodes, and grey upgrades (`gpufleet.upgrade`), each journaled with who asked and why."""
