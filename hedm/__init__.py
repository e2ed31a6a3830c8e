"""The NF- and FF-HEDM application of mpistage (Wozniak et al., section V).

An application built on the library, not part of it: nothing in ``hooks``,
``stager``, ``workflows`` or ``kernels`` imports it. Flow files run with the
workflow runner, staged by the hook specs beside them::

    mpirun -n 4 python -m workflows run hedm/nf.py --stage hedm/hooks/nf.hook \\
        --emulate-nodes 2 --out OUT -- --params '$HEDM_STAGE/%n/nf/nf.params' ...

Modules: ``nf`` (NF stage 1, reduction), ``nffit`` (NF stage 2, orientation fitting),
``ff`` (FF stage 1, peaks) and ``ffgrains`` (FF stage 2: ``ffspots``, ``ffindex``,
``ffrefine``, ``grainscsv`` -- MIDAS's Grains.csv --, ``ffparams``; the flows),
``nfreduce`` and ``ffpeaks`` (NF stage 1's per-frame reduction and FF peak search as
stream analyses: live with ``stager stream receive --analysis``), ``micmap`` (the NF map:
grains, IPF colours, HDF5, MIDAS's ``.mic``, PNG), ``params`` (MIDAS-like parameter files,
one file for both NF stages), ``common`` (per-worker caches, tables, phases), ``output``
(HDF5, CSV, PNG), ``run`` (run record, drain), ``synth``, ``nfsynth`` and ``ffsynth``
(synthetic datasets with ground truth, scoring), ``demo`` + ``demo_report`` (``make
demo``), ``hooks/`` (the specs). The files between the NF stages: ``docs/nf-files.md``.
"""
