"""The configuration: one frozen ``Config`` of pydantic models, loaded once from YAML and the
environment, and the reference tables written from it.
"""
