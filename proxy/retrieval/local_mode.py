"""The previous embedded store's folder (qdrant-client local mode), which this version no longer reads.

Kept apart from the engine's own modules so that ``prefixgate serve`` can refuse such a folder at start
without loading Qdrant's engine: a gateway with no tenant collections never loads it.
"""

from __future__ import annotations

from pathlib import Path


class LocalModeFolder(Exception):
    """The folder holds chunks in the previous embedded store's format (qdrant-client local mode)."""

    def __init__(self, path: Path) -> None:
        super().__init__(
            f"{path} holds collections of the previous embedded store (qdrant-client local mode), which this "
            f"version no longer reads: run `prefixgate migrate-store` once to copy them to the embedded engine "
            f"(the old files stay until you delete them)")


def holds_local_mode(path: Path) -> bool:
    """True where ``path`` has local-mode collections and no embedded-engine folder yet."""
    collections = path / "collection"
    return ((path / "meta.json").is_file() and collections.is_dir() and any(collections.iterdir())
            and not (path / "edge").is_dir())
