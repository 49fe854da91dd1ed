"""Where a request goes: pools and replicas, the replica load read from each engine, health, and
litellm pools. The call itself, which talks to the client, lives in ``proxy.calls``.
"""
