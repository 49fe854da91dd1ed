"""`prefixgate migrate-store`: the previous embedded store's folder, copied once into the embedded engine.

Gateways and ``prefixgate ingest`` refuse a folder in the old format rather than answer without context;
this is the one command their message names.
"""

from __future__ import annotations

import asyncio
from typing import Any

from proxy.commands.command_config import config_or_report
from proxy.retrieval.local_mode import holds_local_mode


def add_parser(commands: Any) -> None:
    parser = commands.add_parser("migrate-store", help="copy the previous embedded Qdrant folder (local mode) into "
                                                       "the embedded engine")
    parser.add_argument("--config", help="YAML config file (default: $PREFIXGATE_CONFIG, else environment only)")
    parser.set_defaults(handler=run)


def run(args: Any) -> int:
    config = config_or_report(args.config, "migrate-store")
    if config is None:
        return 2
    path = config.qdrant_path()
    if config.retrieval.qdrant_url or not holds_local_mode(path):
        print(f"prefixgate migrate-store: nothing to migrate: {path} holds no collections of the previous embedded "
              "store, or they were migrated already")
        return 0
    from proxy.retrieval.migration import migrate_local_mode  # the old and new engines: loaded for this command only

    done = asyncio.run(migrate_local_mode(path))
    print(f"migrated {done.chunks} chunks of {len(done.pairs)} tenant collections and {done.documents} document "
          f"records into {path / 'edge'}; the old files (collection/, meta.json) stay until you delete them")
    return 0
