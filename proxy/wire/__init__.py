"""What the client sees and sends on the wire, below any route: OpenAI-shaped errors and SSE error
events, SSE keep-alives, the disconnect watch, and prefixgate's request and response headers. It
imports nothing else of prefixgate, so the routes (``proxy.http``), the calls (``proxy.calls``) and
the pools (``proxy.upstream``) all build on it.
"""
