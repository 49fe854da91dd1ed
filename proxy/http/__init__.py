"""The HTTP edge: the hot generation routes (``GenerationRoute`` behind ``FastPath``), one per API's
``Dialect``, each request's steps (``Preparation``), the admin route's explainer of them, the light service
routes, and request bodies. What goes on the wire below the routes (the client's answer, errors, SSE,
disconnects, headers) lives in ``proxy.wire``.
"""
