"""Whether a request goes, and when: token caps, length prediction, rate limits (``Admission``,
``Limiter``), prompt token counts, and each pool's in-flight cap with its fair queue (``PoolGate``).
"""
