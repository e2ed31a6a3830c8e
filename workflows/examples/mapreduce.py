"""MapReduce as in the paper's Figure 4: N inputs -> map -> pairwise merge -> one output file.

Each input file holds integers; ``map_file`` turns one file into a partial
result (a histogram of the values modulo ``--bins`` and a line naming the
file), ``merge`` combines two partial results (adds histograms, concatenates
lines: associative, not commutative) and ``reduce_tree`` merges pairs as soon
as both exist -- there is no barrier between map and reduce. The final
``write_output`` task writes ``mapreduce.txt`` into the output directory, so
the same run on ``inline``, ``local``, ``mpi`` and ``parsl`` gives the same
file byte for byte::

    python -m workflows run workflows/examples/mapreduce.py --executor local --out /tmp/a -- --n 64
    mpirun -n 4 python -m workflows run workflows/examples/mapreduce.py --out /tmp/b -- --n 64
    cmp /tmp/a/mapreduce.txt /tmp/b/mapreduce.txt

Without ``--inputs DIR`` the flow first makes ``--n`` input files (one task
each) in ``OUT/inputs``. ``%n`` in ``--inputs`` or ``--out`` is each node's name
(:func:`workflows.on_this_node`): a task reads the copy on the node it runs on, and the
output goes to the node that writes it, as the stager and ``stager drain`` name them.
"""

from __future__ import annotations

import glob
import os
import random

from workflows import app, foreach, on_this_node, reduce_tree


def add_arguments(parser):
    parser.add_argument("--n", type=int, default=32, help="number of generated inputs")
    parser.add_argument("--values", type=int, default=1000, help="integers per generated input")
    parser.add_argument("--bins", type=int, default=16, help="histogram bins (value modulo bins)")
    parser.add_argument("--inputs", default=None, help="directory of *.txt inputs (else generated)")


@app
def make_input(path, index, count):
    """Write ``count`` pseudo-random integers (seeded by ``index``) to ``path``."""
    rng = random.Random(index)
    with open(path, "w") as fh:
        fh.write("\n".join(str(rng.randrange(1_000_000)) for _ in range(count)) + "\n")
    return path


@app
def map_file(path, bins):
    """One partial result: (histogram of value % bins, [summary line of this file])."""
    with open(on_this_node(path)) as fh:
        values = [int(line) for line in fh if line.strip()]
    hist = [0] * bins
    for v in values:
        hist[v % bins] += 1
    line = f"{os.path.basename(path)} n={len(values)} sum={sum(values)}"
    return hist, [line]


@app
def merge(a, b):
    """Add histograms, concatenate summary lines (order kept by the ordered tree)."""
    return [x + y for x, y in zip(a[0], b[0])], a[1] + b[1]


@app
def write_output(result, path):
    hist, lines = result
    path = on_this_node(path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w") as fh:
        fh.write(f"inputs {len(lines)}\n")
        fh.write("histogram " + " ".join(map(str, hist)) + "\n")
        fh.write("\n".join(lines) + "\n")
    os.replace(path + ".tmp", path)
    return path


def main(args):
    bins = getattr(args, "bins", 16)
    if getattr(args, "inputs", None):
        # Listed on this node; each task reads its own node's copy (the template kept).
        here = on_this_node(args.inputs)
        inputs = [os.path.join(args.inputs, os.path.basename(p))
                  for p in sorted(glob.glob(os.path.join(here, "*.txt")))]
        if not inputs:
            raise ValueError(f"no *.txt files in {here}")
    else:
        folder = os.path.join(args.out, "inputs")
        os.makedirs(folder, exist_ok=True)
        inputs = [
            make_input(os.path.join(folder, f"in{i:05d}.txt"), i, args.values)
            for i in range(args.n)
        ]
    partials = foreach(map_file, inputs, bins)
    return write_output(reduce_tree(merge, partials, ordered=True),
                        os.path.join(args.out, "mapreduce.txt"))
