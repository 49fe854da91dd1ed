"""Another process writing to the embedded store, as `prefixgate ingest` does beside a gateway.

    python -m tests.support.edge_writer FOLDER DOC_ID SECONDS

Stores one chunk of tenant "acme" in collection "docs" inside one ``EdgeStore.writing`` block, prints
"written" once the chunk is in its unpublished copy, then holds the block open for SECONDS (a long
ingest), so a test can kill it there or start a second writer beside it.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from proxy.retrieval.edge_store import EdgeStore
from proxy.retrieval.vector_store import StoredChunk


def stored_chunk(doc_id: str, vector: list[float]) -> StoredChunk:
    point_id = f"00000000-0000-4000-8000-{abs(hash(doc_id)) % 10**12:012d}"
    return StoredChunk(point_id, vector, "acme", doc_id, 0, f"chunk of {doc_id}", doc_id, 0, 10)


async def write(folder: Path, doc_id: str, seconds: float) -> None:
    store = EdgeStore.open(folder, dimensions=3)
    try:
        async with store.writing("docs", "acme"):
            await store.upsert("docs", "acme", [stored_chunk(doc_id, [1.0, 0.0, 0.0])])
            print("written", flush=True)
            await asyncio.sleep(seconds)
    finally:
        await store.aclose()


if __name__ == "__main__":
    asyncio.run(write(Path(sys.argv[1]), sys.argv[2], float(sys.argv[3])))
