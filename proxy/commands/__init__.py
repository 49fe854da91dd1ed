"""The ``prefixgate`` command line: serve, ingest, analyze.
"""
