"""The HTTP edge: the hot generation routes (``GenerationRoute`` behind ``FastPath``), the light
service routes, request bodies, and each request's preparation steps. What goes on the wire below
the routes (errors, SSE, disconnects, headers) lives in ``proxy.wire``.
"""
