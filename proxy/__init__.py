"""prefixgate's I/O shell, one package per capability; the decisions it acts on live in ``policies``.

``proxy.app.create_app`` builds the ASGI app; docs/architecture.md maps where everything lives.
"""
