"""Live detector streams straight into node memory (the wire protocols and their internals).

Two wire protocols end in the same :class:`Assembler` and the same loss accounting
(:class:`ScanReport`):

- the native ``mpistage-stream/1`` (``docs/stream-protocol.md``): ZeroMQ PUSH
  producers -> PULL :class:`Receiver`, msgpack header + payload, frames routed to
  receiver ``frame mod R``, found through a rendezvous file
  (:mod:`streams.protocols.native`);
- DECTRIS Stream V2 (CBOR start/image/end, :mod:`streams.protocols.stream2`).

A protocol is one folder of :mod:`streams.protocols` plus one row of its table
(:data:`streams.protocols.ROWS`); the MPI receiving job is :mod:`streams.job`
(:func:`streams.job.session.receive_scans`, ``stager stream receive``).

Importing this package loads none of zmq, msgpack, cbor2 or numpy: the names
below are resolved on first use.
"""
from __future__ import annotations

import lazy_loader

from streams.errors import (CodecError, MissingDependency, ProtocolError, RendezvousError,
                            StreamError)

__all__ = [
    "StreamError", "ProtocolError", "RendezvousError", "CodecError", "MissingDependency",
    # what every protocol hands the assembler
    "Reason", "ScanGeometry", "Begin", "Data", "End", "sector_rows",
    # the native protocol's headers
    "PROTOCOL", "decode_header", "encode_begin", "encode_data", "encode_end", "route",
    # rendezvous
    "Rendezvous", "write_rendezvous", "read_rendezvous", "wait_for_rendezvous",
    # memory and accounting
    "Assembler", "Partition", "ScanReport",
    # sockets
    "Receiver", "Producer",
    # Stream V2
    "StreamV2Receiver", "StreamV2Simulator", "decode_message",
    # simulation
    "SimulatedScan", "synthetic_frame", "run_producers",
    # the protocols' table
    "protocol", "register",
]

# loaded on first use (lazy_loader, scientific-python's PEP 562 helper): ``import streams``
# loads none of zmq, msgpack, cbor2 or numpy
__getattr__, __dir__, _ = lazy_loader.attach(__name__, submod_attrs={
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
})
