"""What the gateway reports: Prometheus metrics (per worker and summed over workers), the
access log, and the prefix meter.
"""
