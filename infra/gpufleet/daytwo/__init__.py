"""Day two on a live pool: the blacklist lifecycle (blacklist, clear, replace), the patrol of idle
nodes, and grey upgrades and reimages (`upgrade_*`, `reimage`), each journaled with who asked and
why in one day-two journal (`journal`) folded into one state (`state`)."""
