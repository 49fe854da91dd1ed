"""`prefixgate ingest`: documents on disk -> chunks -> embeddings -> Qdrant, for one tenant's collection.

The work is ``proxy.retrieval.ingestion.ingest``; this is the command around it: arguments, the
config, what it prints, and its exit status.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from proxy.clock import SYSTEM_CLOCK
from proxy.config.gateway import OPEN_TENANT
from proxy.retrieval.local_mode import LocalModeFolder, holds_local_mode


def add_parser(commands: Any) -> None:
    parser = commands.add_parser("ingest", help="add .txt .md .html .pdf documents to a tenant's retrieval collection")
    parser.add_argument("paths", nargs="*", help="files or folders (searched for .txt, .md, .html, .pdf)")
    parser.add_argument("--tenant", required=True, help="the tenant whose collection receives the chunks")
    parser.add_argument("--collection", help="default: tenants.<tenant>.retrieval.collection, else 'prefixgate'")
    parser.add_argument("--delete", metavar="DOC", action="append", default=[], help="remove a document instead")
    parser.add_argument("--config", help="YAML config file (default: $PREFIXGATE_CONFIG, else environment only)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.set_defaults(handler=run)


def run(args: Any) -> int:
    import asyncio
    import sys

    from proxy.commands.command_config import config_or_report

    config = config_or_report(args.config, "ingest")
    if config is None:
        return 2
    if not args.paths and not args.delete:
        print("prefixgate ingest: give PATH... to add or --delete DOC to remove", file=sys.stderr)
        return 2
    missing = [path for path in args.paths if not Path(path).exists()]
    if missing:  # before the model loads: a typo should not cost ten seconds
        print(f"prefixgate ingest: no such file or directory: {', '.join(missing)}", file=sys.stderr)
        return 2
    own = config.tenants.get(args.tenant)
    collection = args.collection or (own.retrieval.collection if own and own.retrieval else "prefixgate")
    if args.tenant not in config.reachable_tenants:
        print(f"prefixgate ingest: warning: no API key in this config names tenant '{args.tenant}', so no request "
              "will get these documents until one does (without keys every request is tenant "
              f"'{OPEN_TENANT}')", file=sys.stderr)
    try:
        return asyncio.run(_ingest_command(args, config, collection))
    except LocalModeFolder as error:
        print(f"prefixgate ingest: {error}", file=sys.stderr)
        return 1


async def _ingest_command(args: Any, config: Any, collection: str) -> int:
    import sys

    # here, not at the top: ``prefixgate serve`` builds this command's parser and never loads the engine
    from proxy.retrieval.ingestion import Ingestion
    from proxy.retrieval.reading import document_id
    from proxy.retrieval.retriever import Retriever

    # Before the embedding model loads (seconds): a folder in the old format then fails at once, with the
    # one line run() prints and no model-loading chatter before it.
    if not config.retrieval.qdrant_url and holds_local_mode(config.qdrant_path()):
        raise LocalModeFolder(config.qdrant_path())
    retriever = await Retriever.start(config, clock=SYSTEM_CLOCK)  # a command: the process's own clock
    settings = config.retrieval
    ingestion = Ingestion(retriever.store, retriever.embedder, collection=collection, tenant=args.tenant,
                          chunk_tokens=settings.chunk_tokens, chunk_overlap=settings.chunk_overlap,
                          boilerplate=settings.boilerplate_rule())
    try:
        for doc in args.delete:
            removed = await ingestion.remove(document_id(Path(doc)))
            print(f"{doc}: removed {removed} chunks")
        if args.paths:
            report = await ingestion.add(args.paths, progress=not args.quiet)
            print(f"ingested {report.documents} documents as {report.chunks} chunks into '{collection}' "
                  f"for tenant '{args.tenant}' (replaced {report.replaced} earlier chunks) in "
                  f"{report.seconds:.1f} s: {report.rates()}")
            if report.boilerplate:
                print(f"left out {report.boilerplate} paragraphs that the collection's documents repeat "
                      f"(headers, footers: retrieval.boilerplate); chunked {report.rechunked} earlier documents "
                      "again to match")
            for reason in report.skipped:
                print(f"prefixgate ingest: skipped {reason}", file=sys.stderr)
            if report.skipped:
                return 1
    finally:
        await retriever.aclose()
    return 0
