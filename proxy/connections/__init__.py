"""Client connections below HTTP: uvicorn's protocol reporting to the ``ConnectionGuard``, which
holds deadlines and a cap so slow or idle clients cannot hold the gateway.
"""
