"""``prefixgate serve`` without tenant collections loads neither Qdrant's engine nor its client.

The engine is a 30 MB library and the client brings gRPC; a gateway that retrieves nothing (most
sidecars) should not pay their start-up time and memory, and should run where they are not installed.
"""

from __future__ import annotations

import subprocess
import sys


def test_the_serve_command_and_the_app_load_no_qdrant_module() -> None:
    probe = ("import sys; import proxy.commands.cli, proxy.app, proxy.gateway; "
             "print(sorted({m.split('.')[0] for m in sys.modules if m.startswith(('qdrant', 'grpc'))}))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]"
