"""The live pool's operations: the alert webhook (`ops serve`) and what it may do on its own,
re-admission after an alert, and the audit log every acting command appends to.
What it watches (counters, rules, scrape) is `gpufleet.monitoring`.
"""
