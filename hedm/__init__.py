"""The NF- and FF-HEDM application of mpistage (Wozniak et al., section V).

An application on the library (nothing in ``hooks``, ``stager``, ``workflows`` or
``kernels`` imports it): flow files run with the workflow runner, staged by the hook
specs beside them (``docs/guide/hedm.md``). NF: ``nf`` (stage 1), ``nffit`` (stage 2),
``nfreduce`` (stage 1 as a stream analysis), ``micmap`` (the map). FF: ``ff``,
``ffgrains`` and their parts, ``ffpeaks``, ``grainscsv``. Shared: ``params``,
``common``, ``output``, ``run``; synthetic data and scoring in ``synth``, ``nfsynth``,
``ffsynth``; ``make demo`` in ``demo*``. The files between the NF stages:
``docs/nf-files.md``.
"""
