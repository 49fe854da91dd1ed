"""Who is asking: API key -> tenant (``KeyTable``), each tenant's policy, the deployment's salt secret.
"""
