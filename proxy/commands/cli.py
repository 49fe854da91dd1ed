"""``prefixgate`` command line.

``prefixgate serve [--config FILE] [--host H] [--port P] [--workers N]`` runs the gateway;
``prefixgate analyze REQUESTS.jsonl [--config FILE]`` estimates its prefix-cache gain on logged requests;
``prefixgate ingest PATH... --tenant T [--delete DOC]`` adds documents to a tenant's retrieval collection.
"""

from __future__ import annotations

import argparse
import functools
import gc
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

import uvicorn

from proxy.app import ENV_RESOLVED_CONFIG, create_app
from proxy.auth.salt_secret import SecretFileError, deployment_secret
from proxy.commands.analyze import add_parser as add_analyze_parser
from proxy.commands.ingest import add_parser as add_ingest_parser
from proxy.commands.migrate import add_parser as add_migrate_parser
from proxy.config import load as config_module
from proxy.config.gateway import Config
from proxy.config.load import ConfigError, dump_config, load_config, with_engine_pool
from proxy.config.reference import add_reference_parser
from proxy.connections.guard import raise_file_limit
from proxy.connections.protocol import GuardedHttpToolsProtocol
from proxy.engine.process import EngineError, LocalEngine, free_port, vllm_available
from proxy.observability.worker_metrics import shared_metrics_dir
from proxy.retrieval.local_mode import LocalModeFolder, holds_local_mode

log = logging.getLogger("prefixgate")


def _start_engine(config: Config) -> tuple[LocalEngine, Config]:
    if not vllm_available():
        raise EngineError(
            "no upstream is configured (set PREFIXGATE_UPSTREAM, or pools: in --config), and the embedded "
            "engine needs vLLM: install prefixgate with its 'engine' extra (make serve does this)."
        )
    settings = config.engine
    args = settings.vllm_args()
    if settings.model_dir:
        model_dir = Path(settings.model_dir)
    else:
        from proxy.engine.tiny_model import answers_end_config, ensure_tiny_model

        model_dir = ensure_tiny_model(config.data_dir)  # built on the first start only, and says so
        if settings.answers_end is not False:
            args = ["--generation-config", str(answers_end_config(model_dir)), *args]
    engine = LocalEngine(
        model_dir,
        served_model_name=settings.served_model_name,
        port=settings.port or free_port(),
        log_path=Path(config.data_dir) / "engine.log",
        max_model_len=settings.max_model_len,
        kv_cache_gib=settings.kv_cache_gib,
        extra_args=args,
    )
    log.info("starting the embedded vLLM CPU engine on %s (log: %s)", engine.base_url, engine.log_path)
    engine.start()
    engine.wait_ready(settings.startup_timeout)
    log.info("engine ready; model '%s'", settings.served_model_name)
    return engine, with_engine_pool(config, engine.base_url, settings.served_model_name, model_dir)


def _serve(config: Config) -> None:
    server = config.server
    run = functools.partial(
        uvicorn.run, host=server.host, port=server.port, loop="uvloop",
        log_level="info", access_log=False, lifespan="on",
        # uvicorn hands both to asyncio's timers, which take float seconds; its annotations say int
        timeout_graceful_shutdown=server.drain_timeout_s,  # type: ignore[arg-type]  # float seconds, see above
        timeout_keep_alive=server.keepalive_timeout_s,  # type: ignore[arg-type]  # float seconds, see above
        # uvicorn's protocol plus deadlines for receiving a request and a connection cap (ConnectionGuard)
        http=GuardedHttpToolsProtocol,
        ws="none",  # no WebSocket routes; an upgrade would also hand the connection out of the guard's sight
        # prefixgate never reads the client address, so skip uvicorn's X-Forwarded-For rewriting:
        # one middleware frame and a header scan less on every request.
        proxy_headers=False,
    )
    if config.auth.keys == [] and server.host not in ("127.0.0.1", "localhost", "::1"):
        log.warning("open mode (no API keys) while listening on %s: anyone who can reach it can use it", server.host)
    if config.unreachable_tenants:
        log.warning("tenants %s: no API key names them, so no request will get their settings (retrieval, limits, "
                    "prompt); give each a key in auth.keys%s", ", ".join(config.unreachable_tenants),
                    " (without keys every request is tenant 'default')" if not config.auth.keys else "")
    if server.workers > 1 and config.redis is None:
        log.warning("%d workers without redis: each keeps its own stored responses, so a previous_response_id that "
                    "reaches another worker gets 404; set redis to share them", server.workers)
    files = raise_file_limit()
    log.info("client connections: at most %d per process (server.max_connections), headers within %g s, "
             "bodies within %g s", server.connection_limits(files).max_connections, server.header_timeout_s,
             server.body_timeout_s)
    settle_garbage_collector()
    log.info("prefixgate listening on http://%s:%d/v1", server.host, server.port)
    if server.workers == 1:
        run(create_app(config))
    else:
        os.environ[ENV_RESOLVED_CONFIG] = dump_config(config)
        with shared_metrics_dir():
            run("proxy.app:app_from_environment", factory=True, workers=server.workers)


def settle_garbage_collector() -> None:
    """Everything imported so far lives for the whole process: keep it out of every GC pass, and collect
    young objects less often, so the collector does not stall relays mid-stream."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 20, 20)


def _check_store_format(config: Config) -> None:
    """Refuse, in one line, a folder of the previous embedded store: serving it would answer without context."""
    if holds_local_mode(config.qdrant_path()):
        raise LocalModeFolder(config.qdrant_path())


def _exit_quietly(signum: int, frame: object) -> None:
    raise SystemExit(0)


def serve(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.config, overrides={"host": args.host, "port": args.port, "workers": args.workers})
        # Read (or generate) the cache-salt secret once here, so every worker process gets the same one.
        secret = deployment_secret(config.resolved_salt_secret, config.data_dir)
        config = config.model_copy(update={"resolved_salt_secret": secret.decode()})
        if config.wants_retrieval and not config.retrieval.qdrant_url:
            _check_store_format(config)
    except (ConfigError, SecretFileError, LocalModeFolder) as error:
        print(f"prefixgate: {error}", file=sys.stderr)
        return 2
    # uvicorn re-raises the SIGTERM it caught once it has drained; with this handler that becomes a
    # normal exit, so the finally below still stops the embedded engine instead of orphaning it.
    signal.signal(signal.SIGTERM, _exit_quietly)
    engine = None
    try:
        if config.wants_engine:
            engine, config = _start_engine(config)
        _serve(config)
    except EngineError as error:
        print(f"prefixgate: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    finally:
        if engine is not None:
            engine.stop()
    return 0


ENVIRONMENT_HELP = "\n".join([
    "environment (beats the config file):",
    f"  {config_module.ENV_CONFIG:<30} the config file, when --config is not given",
    f"  {config_module.ENV_UPSTREAM:<30} comma-separated replica base URLs of one pool (replaces pools)",
    f"  {config_module.ENV_HOST:<30} listen address (server.host)",
    f"  {config_module.ENV_PORT:<30} listen port (server.port)",
    f"  {config_module.ENV_DATA_DIR:<30} tiny model, engine log, embedded Qdrant, generated salt secret",
    f"  {config_module.ENV_CACHE_SALT_SECRET:<30} the cache-salt secret (auth.cache_salt_secret)",
    "Every setting: docs/configuration.md.",
])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="prefixgate", description="OpenAI-compatible gateway for vLLM pools")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser(
        "serve", help="run the gateway", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run the gateway. With no upstream (no pools in the config, no PREFIXGATE_UPSTREAM) it first "
                    "builds a tiny demo model and starts an embedded vLLM CPU engine, and serves that.",
        epilog=ENVIRONMENT_HELP)
    run.add_argument("--config", help="YAML config file (default: $PREFIXGATE_CONFIG, else environment only)")
    run.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    run.add_argument("--port", type=int, help="port to listen on (default $PREFIXGATE_PORT or 8080)")
    run.add_argument("--workers", type=int, help="uvicorn worker processes (default 1)")
    run.set_defaults(handler=serve)
    add_analyze_parser(commands)
    add_ingest_parser(commands)
    add_migrate_parser(commands)
    commands.metavar = "{" + ",".join(commands.choices) + "}"  # the commands a user runs
    add_reference_parser(commands)  # a maintainer's tool, left out of the list above
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
