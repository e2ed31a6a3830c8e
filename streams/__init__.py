"""Live detector streams straight into node memory (issue 15, phase 1: the protocols).

Two wire protocols end in the same :class:`Assembler` and the same loss accounting
(:class:`ScanReport`):

- the native ``mpistage-stream/1`` (``docs/stream-protocol.md``): ZeroMQ PUSH
  producers -> PULL :class:`Receiver`, msgpack header + payload, frames routed to
  receiver ``frame mod R``, found through a rendezvous file;
- DECTRIS Stream V2 (CBOR start/image/end, :mod:`streams.streamv2`).

Importing this package loads none of zmq, msgpack, cbor2 or numpy: the names
below are resolved on first use.
"""
from __future__ import annotations

import importlib
from typing import Any

from streams.errors import (CodecError, MissingDependency, ProtocolError,
                                  RendezvousError, StreamError)

__all__ = [
    "StreamError", "ProtocolError", "RendezvousError", "CodecError", "MissingDependency",
    # protocol
    "PROTOCOL", "Reason", "ScanGeometry", "Begin", "Data", "End", "decode_header",
    "encode_begin", "encode_data", "encode_end", "sector_rows", "route",
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
]

_WHERE = {
    "PROTOCOL": "protocol", "Reason": "protocol", "ScanGeometry": "protocol",
    "Begin": "protocol", "Data": "protocol", "End": "protocol", "decode_header": "protocol",
    "encode_begin": "protocol", "encode_data": "protocol", "encode_end": "protocol",
    "sector_rows": "protocol", "route": "protocol",
    "Rendezvous": "rendezvous", "write_rendezvous": "rendezvous",
    "read_rendezvous": "rendezvous", "wait_for_rendezvous": "rendezvous",
    "Assembler": "assemble", "Partition": "assemble", "ScanReport": "accounting",
    "Receiver": "receiver", "Producer": "producer",
    "StreamV2Receiver": "streamv2_receiver", "StreamV2Simulator": "simulate",
    "decode_message": "streamv2",
    "SimulatedScan": "simulate", "synthetic_frame": "simulate", "run_producers": "simulate",
}


def __getattr__(name: str) -> Any:
    mod = _WHERE.get(name)
    if mod is None:
        raise AttributeError(f"module 'streams' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"streams.{mod}"), name)
    globals()[name] = value
    return value


def __dir__() -> list:
    return sorted(__all__)
