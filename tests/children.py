"""Fresh processes for the tests of what outlives a process: Numba's disk cache under ``base_compiledir``.

A child runs a script given as a string (``python -c``) with PyTensor's compile
directory set, and prints one JSON line last: what it computed and what it compiled.
"""

import json
import os
import subprocess
import sys
from typing import Any


def spawn(script: str, compiledir: Any, *args: str, wait: bool = True) -> Any:
    """Run ``script`` with ``args`` on ``compiledir``: its JSON line (``wait``), or the running process."""
    env = {**os.environ, "PYTENSOR_FLAGS": f"base_compiledir={compiledir}"}
    process = subprocess.Popen(
        [sys.executable, "-c", script, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    return result(process) if wait else process


def result(process: subprocess.Popen) -> Any:
    """The last line a child printed, as JSON, once it has ended; its stderr's end if it failed."""
    out, err = process.communicate()
    assert process.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])
