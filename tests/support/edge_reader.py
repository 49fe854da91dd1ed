"""A gateway worker's reads of the embedded store, again and again, in a process of its own.

    python -m tests.support.edge_reader FOLDER SECONDS [hold]

For SECONDS: open the store under FOLDER and read its ``versions`` as a worker does at start (copying the
published collections), search collection "docs" for tenant "acme", poll ``versions`` again (moving to any
generation published meanwhile), search again, close; repeat. Prints
"reads N" at the end; any exception ends the process with its traceback and a non-zero status. With
``hold``: open and search once, print "holding", and keep the store open for SECONDS (a worker to kill).
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

from proxy.retrieval.edge_store import EdgeStore


async def read(folder: Path, seconds: float) -> int:
    deadline = time.monotonic() + seconds
    reads = 0
    while time.monotonic() < deadline:
        store = EdgeStore.open(folder, dimensions=3)
        try:
            await store.versions()
            for _ in range(3):
                hits = await store.search("docs", "acme", [1.0, 0.0, 0.0], 5)
                assert hits, "a search of a published collection found nothing"
                await store.versions()
                reads += 1
        finally:
            await store.aclose()
    return reads


async def hold(folder: Path, seconds: float) -> None:
    store = EdgeStore.open(folder, dimensions=3)
    try:
        await store.versions()
        assert await store.search("docs", "acme", [1.0, 0.0, 0.0], 5)
        print("holding", flush=True)
        await asyncio.sleep(seconds)
    finally:
        await store.aclose()


if __name__ == "__main__":
    if sys.argv[3:] == ["hold"]:
        asyncio.run(hold(Path(sys.argv[1]), float(sys.argv[2])))
    else:
        print("reads", asyncio.run(read(Path(sys.argv[1]), float(sys.argv[2]))), flush=True)
