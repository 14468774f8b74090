"""Gates: parse raw tool output from node bundles, decide per-node verdicts, isolate faults.

Why a package of pure decisions: the same parsers and checks must run on real nodes, on
recorded fixtures and on the simulator (DESIGN.md section 5). Only `bundle` (read/write)
and `command` (the `gpufleet gate` CLI) touch the file system.

Modules: bundle (the raw-output contract), parsers/ (one per tool), xid (Xid buckets),
verdict (CheckResult, worst-of, remediate-then-retest), checks (preflight checks),
baseline (intra-node all_reduce gate), isolation (multi-node pair/ring attribution),
launch (srun / MPIJob / mpirun specs), admission (per-node record), evaluate (gate a cohort
of bundles), command (the click command; its JUnit XML is gpufleet.reports.gate_document's).
"""
