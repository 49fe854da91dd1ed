"""Where a request goes and the call itself: pools and replicas, the replica load read from each
engine, the upstream call (slot, replica, retry, relay), and litellm pools.
"""
