"""What the gateway reports: Prometheus metrics (per worker and summed over workers), each request's
record (its metrics and access-log line), the access log, and the prefix meter.
"""
