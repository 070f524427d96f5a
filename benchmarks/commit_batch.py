"""Batch ingest with commits of different sizes: ``COMMIT_BATCH`` profiles a worker derives and commits together.

Run (a corpus of make_corpus.py)::

    python benchmarks/commit_batch.py /tmp/corpus1000 --sizes 8 32 --rounds 2

Each run is a fresh ``xprosql ingest CORPUS --jobs 2 --compact never`` process of this checkout (through a two-line
wrapper that sets the size first), the sizes alternating; prints wall and CPU seconds and the peak RSS of the
largest process.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from startup import run  # noqa: E402

# The parent makes the chunks; the workers (spawned: they import this file as __mp_main__) need nothing set.
_WRAPPER = ("import importlib, sys\n"
            "if __name__ == '__main__':\n"
            "    importlib.import_module('xprosql.ingest.batch').COMMIT_BATCH = int(sys.argv.pop(1))\n"
            "    from xprosql.cli import main\n"
            "    sys.exit(main(sys.argv[1:]))\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus", type=Path)
    parser.add_argument("--sizes", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        wrapper = Path(scratch) / "ingest_with.py"
        wrapper.write_text(_WRAPPER)
        out = Path(scratch) / "warehouse"
        for round_ in range(1, args.rounds + 1):
            for size in args.sizes:
                wall, cpu, peak = run([sys.executable, str(wrapper), str(size), "ingest", str(args.corpus), "--into",
                                       str(out), "--jobs", str(args.jobs), "--quiet", "--compact", "never"],
                                      tree=HERE.parent, repeat=1, fresh=out)
                print(f"round {round_}, COMMIT_BATCH={size}: {wall:.1f} s, {cpu:.1f} s CPU, {peak:.0f} MB peak", flush=True)


if __name__ == "__main__":
    main()
