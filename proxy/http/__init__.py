"""The HTTP edge: the hot generation routes (``GenerationRoute`` behind ``FastPath``), the light
service routes, request bodies, OpenAI-shaped errors, disconnects and SSE keep-alives.
"""
