"""Live detector streams straight into node memory (the wire protocols and their internals).

Every protocol ends in the same :class:`Assembler` and loss accounting
(:class:`ScanReport`): the native ``mpistage-stream/1`` (``docs/stream-protocol.md``;
PUSH producers -> PULL :class:`Receiver`, frame f to receiver ``f mod R``, found
through a rendezvous file), DECTRIS Stream V2 and the others of
:data:`streams.protocols.ROWS`. The MPI receiving job is :mod:`streams.job`
(``stager stream receive``). Importing this package loads none of zmq, msgpack,
cbor2 or numpy: the names below resolve on first use.
"""
from __future__ import annotations

import lazy_loader

from streams.errors import (CodecError, MissingDependency, ProtocolError, RendezvousError,
                            StreamError)

# loaded on first use (lazy_loader, scientific-python's PEP 562 helper): ``import streams``
# loads none of zmq, msgpack, cbor2 or numpy
_LAZY = {
    "protocol": ["Reason", "ScanGeometry", "Begin", "Data", "End", "sector_rows"],
    "protocols.native.headers": ["PROTOCOL", "decode_header", "encode_begin", "encode_data",
                                 "encode_end", "route"],
    "protocols": ["protocol", "register"],
    "protocols.native.rendezvous": ["Rendezvous", "write_rendezvous", "read_rendezvous",
                                    "wait_for_rendezvous"],
    "assemble": ["Assembler", "Partition"],
    "accounting": ["ScanReport"],
    "protocols.native.receiver": ["Receiver"],
    "protocols.native.producer": ["Producer"],
    "protocols.stream2.receiver": ["StreamV2Receiver"],
    "protocols.stream2.simulator": ["StreamV2Simulator"],
    "protocols.stream2.streamv2": ["decode_message"],
    "simulate": ["SimulatedScan", "synthetic_frame", "run_producers"],
}
__getattr__, __dir__, _ = lazy_loader.attach(__name__, submod_attrs=_LAZY)
__all__ = ["StreamError", "ProtocolError", "RendezvousError", "CodecError", "MissingDependency",
           *(name for names in _LAZY.values() for name in names)]
