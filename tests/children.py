"""Fresh processes for the tests of what outlives a process: Numba's disk cache under ``base_compiledir``.

A child runs a script given as a string (``python -c``) with PyTensor's compile
directory set, and prints one JSON line last: what it computed and what it compiled.
"""

import json
import os
import subprocess
import sys
from collections.abc import Callable
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


#: Child-script code (top level of a script given to `spawn`) that records in ``compiled`` the
#: name of every function Numba compiles, and defines ``dispatchers(root)`` (every jitted function
#: a compiled function reaches through its globals) and ``linked(dispatcher)`` (the names of the
#: code libraries its compiled code links).
WATCH = """compiled = []

class Count(event.Listener):
    def on_start(self, ev):
        pass

    def on_end(self, ev):
        compiled.append(getattr(getattr((ev.data or {}).get("dispatcher"), "py_func", None), "__name__", "?"))

event.register("numba:compile", Count())


def dispatchers(root):
    seen, todo = {}, [root]
    while todo:
        d = todo.pop()
        if id(d) in seen or not hasattr(d, "py_func"):
            continue
        seen[id(d)] = d
        # a node the final function calls by reference is an intrinsic holding its body function
        todo.extend(getattr(v, "body", v) for v in d.py_func.__globals__.values() if hasattr(getattr(v, "body", v), "py_func"))
    return list(seen.values())

def linked(dispatcher):
    names, todo = set(), [o.library for o in dispatcher.overloads.values()]
    while todo:
        library = todo.pop()
        for inner in getattr(library, "_linking_libraries", ()):
            names.add(inner.name)
            todo.append(inner)
    return names
"""


def header(variant: str) -> str:
    """The first lines of a child script that watches Numba: ``json``, Numba's events, and ``final_function``.

    ``innergraph``'s imports innergraph and its ``final_function`` (the function a compiled
    PyTensor function calls); ``vanilla``'s never imports innergraph, and its
    ``final_function`` is the function itself.
    """
    imports = "import innergraph\nfrom innergraph.backends.numba_link import final_function\n"
    return "import json\nfrom numba.core import event\n" + (imports if variant == "innergraph" else "final_function = lambda fn: fn\n")


def vanilla_then_twice(child: Callable[[str], str], tmp_path_factory: Any) -> tuple[Any, Any, Any]:
    """``child("vanilla")`` in a fresh process; ``child("innergraph")`` twice on one new compile directory (the second loads the first's cache)."""
    vanilla = spawn(child("vanilla"), tmp_path_factory.mktemp("vanilla"))
    compiledir = tmp_path_factory.mktemp("innergraph")
    first = spawn(child("innergraph"), compiledir)
    second = spawn(child("innergraph"), compiledir)
    return vanilla, first, second
