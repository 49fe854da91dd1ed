"""Fixtures shared by test modules of different tests/proxy folders."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.tenant_corpus import ingested_data_dir


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """acme's and globex's documents (tests/support/tenant_corpus.py) ingested into one collection under
    a fresh data dir, once per test module; returns the dir. Used by the retrieval tests
    (retrieval/test_retriever.py) and the tenant-isolation tests (test_tenant_isolation.py)."""
    return ingested_data_dir(tmp_path_factory)
