"""Where a request goes: the pool (by predicted length, start short and continue long), the replica (prefix
affinity, KV blocks, engine load), health and retries.
"""
