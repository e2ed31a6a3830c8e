"""The table of stream protocols: what a protocol brings, and the one row that registers it.

A protocol is one folder of this package (decoder, socket, simulator) with a
:class:`StreamProtocol` subclass in its ``__init__.py``, plus one row of
:data:`ROWS` (``"module:Class"``, imported when first asked, so ``import streams``
loads none). The receiving job and ``stager stream receive --protocol NAME`` ask
it through this table (routing, its :class:`ProtocolOption` rows, socket, checks,
rendezvous, detector metadata); nothing else branches on a protocol's name. A
protocol from outside registers with :func:`register` (``tests/toyprotocol.py``).
"""
from __future__ import annotations

import json
import os
from typing import Any, Callable, Dict, List, Optional, Tuple

from core.options import Option
from core.table import Table

__all__ = ["StreamProtocol", "ProtocolOption", "ROWS", "register", "protocol", "chosen",
           "options", "connect_from", "write_rendezvous_json"]


#: One option of a protocol or of the detector controls, resolved like the job's own into
#: ``SessionOptions.protocol_options`` (:class:`core.options.Option`).
ProtocolOption = Option


class StreamProtocol:
    """One stream protocol, as the receiving job asks it: subclass it, set
    :attr:`name` and :attr:`routing`, implement :meth:`socket` and :meth:`rendezvous`
    (the other methods have defaults)."""

    name: str       # the word of ``--protocol`` and of the reports
    routing: str    # "modulo": frame f reaches receiver f mod R (the producers route);
                    # "any": any receiver may get any frame (a detector deals them out)
    #: the protocol's own options (its values: ``options.protocol_options[NAME]``)
    options: Tuple[ProtocolOption, ...] = ()

    def check(self, options: Any) -> None:
        """Rank 0, before anything is bound: raise ``ValueError`` naming the option
        this protocol cannot honour (``options`` is the job's ``SessionOptions``).
        Default: everything is honoured."""

    def socket(self, loop: Any, options: Any, index: int, count: int,
               partition_frames: Any, security: Any) -> str:
        """Make receiver ``index`` of ``count``'s socket (a :class:`~streams.socketloop.SocketLoop`
        feeding ``loop.deliver``), set ``loop.socket``, bind or connect it; return what the
        rendezvous file lists. Starts and ends that reach one receiver only are shared here
        (``loop.share``).
        """
        raise NotImplementedError(f"stream protocol {self.name!r} makes no socket")

    def rendezvous(self, options: Any, endpoints: List[str], live: Optional[str],
                   security: Any) -> None:
        """Rank 0: write ``options.rendezvous``, what a producer or a viewer reads to
        find the job (``endpoints``: every receiver's :meth:`socket` answer)."""
        raise NotImplementedError(f"stream protocol {self.name!r} writes no rendezvous file")

    def detector_metadata(self, socket: Any, scan: str) -> Optional[Callable[[Any], None]]:
        """Rank 0, when ``scan`` is written: the writer of its ``/detector`` group
        (:func:`analyses.output.write_scan` calls it), from rank 0's ``socket`` (None when it
        receives nothing); default None, no group."""
        return None


def connect_from(bind_host: str) -> Optional[str]:
    """The local interface a receiver connects to its detector from (``--bind``; None: any)."""
    return None if bind_host in ("*", "", "0.0.0.0") else bind_host


def write_rendezvous_json(o: Any, doc: Dict[str, Any]) -> None:
    """Rank 0: ``doc`` as the job's rendezvous file ``o.rendezvous`` (atomic, mode
    ``o.rendezvous_mode``), for a protocol whose receivers connect to the detector."""
    from core import localfs

    localfs.write_bytes_atomic(os.path.abspath(o.rendezvous),
                               (json.dumps(doc, indent=1) + "\n").encode(), mode=o.rendezvous_mode)


#: name -> "module:Class" (or an instance)
ROWS: Table[StreamProtocol] = Table("stream protocol", {
    "native": "streams.protocols.native:Native",
    "stream2": "streams.protocols.stream2:StreamV2",
    "dectris-legacy": "streams.protocols.dectris_legacy:DectrisLegacy",
    "merlin": "streams.protocols.merlin:Merlin",
    "asi-tpx3": "streams.protocols.asi_tpx3:AsiTpx3",
}, make=lambda cls: cls(), paths=True,
    hint="a plug-in registers with streams.protocols.register")


def register(name: str, row: Any) -> None:
    """Add (or replace) protocol ``name``: ``"module:Class"`` or an instance."""
    ROWS.register(name, row)


def protocol(name: str) -> StreamProtocol:
    """The protocol called ``name`` (its module imported on first use), or named by
    ``"module:Class"`` (a plug-in not in the table, as ``--protocol`` takes it)."""
    return ROWS.load(name)


def options() -> List[ProtocolOption]:
    """The options of every protocol of the table, in its order (each protocol's
    module imported): the flags ``stager stream receive`` offers."""
    return [o for name in ROWS for o in protocol(name).options]


def chosen(name: Optional[str], stream2: Optional[str]) -> StreamProtocol:
    """The job's protocol: ``--protocol NAME``, else ``stream2`` when ``--stream2
    ENDPOINT`` (its shorthand) is given, else the native protocol."""
    if stream2 and name not in (None, "stream2"):
        raise ValueError(f"--stream2 is the Stream V2 protocol; --protocol {name} "
                         "contradicts it")
    return protocol(name or ("stream2" if stream2 else "native"))
