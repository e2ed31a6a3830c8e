"""The NF- and FF-HEDM application of mpistage (Wozniak et al., section V).

An application built on the library, not part of it: nothing in ``hooks``,
``stager``, ``workflows`` or ``kernels`` imports it. Flow files run with the
workflow runner, staged by the hook specs beside them::

    mpirun -n 4 python -m workflows run hedm/nf.py --stage hedm/hooks/nf.hook \\
        --emulate-nodes 2 --out OUT -- --params '$HEDM_STAGE/%n/nf/nf.params' ...

Modules: ``nf`` and ``ff`` (the flows), ``params`` (MIDAS-like parameter
files), ``common`` (per-worker caches, tables, phases), ``output`` (HDF5,
CSV, PNG), ``run`` (run record, drain), ``synth`` (synthetic datasets and
scoring), ``demo`` + ``demo_report`` (``make demo``), ``hooks/`` (the specs).
"""
