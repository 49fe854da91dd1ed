"""The previous embedded store's folder format, for the tests of what meets it: refusal and migration."""

from __future__ import annotations

import uuid
from pathlib import Path

from qdrant_client import QdrantClient, models


def old_format_folder(path: Path) -> None:
    """A folder as the previous embedded store (qdrant-client local mode) left it: one tenant's collection."""
    client = QdrantClient(path=str(path))
    client.create_collection("prefixgate--0011223344556677",
                             vectors_config=models.VectorParams(size=384, distance=models.Distance.COSINE))
    payload = {"tenant": "default", "doc_id": "returns.md", "chunk_index": 0, "text": "Items may be returned within "
               "30 days.", "source": "returns.md", "start": 0, "end": 33}
    client.upsert("prefixgate--0011223344556677", [models.PointStruct(id=str(uuid.uuid4()), vector=[0.05] * 384,
                                                                      payload=payload)])
    client.close()
