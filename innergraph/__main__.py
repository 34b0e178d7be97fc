"""``python -m innergraph [bench ...]``: the demonstration and the benchmarks.

Both live in the `innergraph_bench` package beside the library (installed with it; its
plotting needs the ``bench`` extra); this entry point only hands over to it.
"""

import sys

from innergraph_bench.__main__ import main

if __name__ == "__main__":
    sys.exit(main())
