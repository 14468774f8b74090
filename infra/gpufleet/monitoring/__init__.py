"""What watches the fleet once it runs: the DCGM counters, the alert rules (admission's own
thresholds), Prometheus' scrape and Alertmanager's routing, and the files the monitoring roles
deploy. Pure documents from the spec, the BOM and the gates' settings; `ops` acts on the alerts,
`pool.kubernetes.monitoring` turns these documents into an EKS pool's objects.
"""
