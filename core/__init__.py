"""mpistage's shared base: what the stager, the stream job and the workflow runtime share.

It imports no other package of the project (``tests/unit/test_layout.py`` checks),
and every other package may import it:

* :mod:`core.job` -- the job context (:class:`Job`: communicator, how ranks form
  nodes, the node layout), made once and passed down; :mod:`core.nodes` -- node
  naming, the node layout and the node-id option (``host``, ``env:VAR``, ``emulate:N``);
* :mod:`core.mpi` -- the MPI plumbing: failure agreement, the message link and
  loop, the role rule, the merge tree;
* :mod:`core.options` -- options resolved one way (keyword > environment >
  default) by strict parsers; each table of options is kept by its owner;
* :mod:`core.localfs`, :mod:`core.trusted`, :mod:`core.commit`,
  :mod:`core.checksum` -- node-local files written privately and atomically,
  opened without following links, checked for owner and mode, checksummed;
* :mod:`core.interrupt` -- SIGINT/SIGTERM: ranks stop together;
* :mod:`core.errors` -- the root of every error of the project
  (:class:`MpistageError`) and the base's own errors;
* :mod:`core.table` -- the one plug-in table (:class:`Table`).

Import the modules themselves (``from core.job import Job``): ``import core`` loads nothing.
"""
