"""Caches shared by gateway replicas: the two-tier (memory, then Redis) cache and the answer store.
"""
