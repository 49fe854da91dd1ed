"""HTTP clients behind one small ``Transport`` protocol: aiohttp (the default) and httpx.
"""
