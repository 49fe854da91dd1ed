"""Retrieval's decisions: ingest chunks, boilerplate a collection repeats, passages as prompt text."""
