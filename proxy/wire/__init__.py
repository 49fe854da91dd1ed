"""What the client sees and sends on the wire, below any route: the one owner of each request's answer
(``ClientAnswer``), OpenAI-shaped errors, SSE keep-alives, the disconnect watch, and prefixgate's request
and response headers. It imports only the clock and policies' refusals, so the routes (``proxy.http``), the
calls (``proxy.calls``) and the connection guard all build on it; the pools hand it data, never bytes to send.
"""
