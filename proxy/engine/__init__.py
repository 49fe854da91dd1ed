"""The embedded vLLM engine: the process prefixgate starts when no upstream is configured, and the
tiny model it serves.
"""
