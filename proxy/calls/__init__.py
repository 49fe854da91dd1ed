"""A request's call to the engines, which knows both the client and the pools: the ``UpstreamCall``
(a slot, a replica, overflow, the answer relayed by an ``Exchange``) and the ``ContinuedAnswer`` that
joins an answer cut in a short pool and continued in the long pool into one. It imports the pools
(``proxy.upstream``) and the wire (``proxy.wire``); the routes (``proxy.http``) import it, never the
reverse.
"""
