"""Where a request goes: the kinds of pool (``POOL_KINDS``: ``Pool``, what every kind has; ``ReplicaPool``,
replicas over HTTP with their load and health; ``LitellmPool``, a hosted provider through litellm). The call
itself, which talks to the client, lives in ``proxy.calls``.
"""
