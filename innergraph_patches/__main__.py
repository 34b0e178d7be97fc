"""``python -m innergraph_patches build|check [--sdist PATH]``: write or compare ``patches/`` (check: and apply the written steps); ``build --tree DIR --out F``: the same series on another PyTensor tree; ``verify [--each]``: test it (`innergraph_patches.verify`); ``whole-suite --steps K --out DIR``: PyTensor's whole suite on the written steps 1-K against vanilla (`innergraph_patches.whole_suite`); ``step-tests [--steps K]``: the regrouped steps' own tests on trees of the steps up to each (`innergraph_patches.step_tests`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from innergraph_patches.build import build_series, check_series
from innergraph_patches.step_tests import main as step_tests
from innergraph_patches.verify import main as verify
from innergraph_patches.whole_suite import main as whole_suite


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["verify"]:
        return verify(argv[1:])
    if argv[:1] == ["whole-suite"]:
        return whole_suite(argv[1:])
    if argv[:1] == ["step-tests"]:
        return step_tests(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m innergraph_patches", description=__doc__)
    parser.add_argument("command", choices=["build", "check", "verify"])
    parser.add_argument("--sdist", type=Path, default=None, help="PyTensor's sdist (sdist.PYTENSOR_VERSION; default: downloaded once, cached)")
    parser.add_argument("--out", type=Path, default=None, help="folder of the series (default: the repository's patches/)")
    parser.add_argument("--tree", type=Path, default=None, help="build on this PyTensor source tree (e.g. a checkout of main) instead of the sdist; with --out")
    args = parser.parse_args(argv)
    if args.tree is not None and (args.command != "build" or args.out is None):
        parser.error("--tree builds a series beside the committed one: `build --tree DIR --out FOLDER`")
    if args.command == "build":
        written = build_series(out=args.out, sdist=args.sdist, tree=args.tree)
        print(f"wrote {len(written)} files to {written[0].parent}")
        return 0
    problems = check_series(out=args.out, sdist=args.sdist)
    for line in problems:
        print(line)
    print("patches/: up to date" if not problems else "patches/ is not up to date (above): a generated file differs (run `python -m innergraph_patches build`) or a written step no longer applies (rewrite it)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
