"""Hook spec files: what to stage, in the I/O hook format of Wozniak et al. (Figure 6).

The spec language only -- grammar, parser, the parsed spec as plain data, the
``h5`` entry syntax and its errors. It imports nothing of the rest of the
project; lark is imported only where a spec is parsed (rank 0). The block kinds
are the stager's: ``stager.planning.kinds`` registers each in :mod:`hooks.kinds`.

>>> from hooks import kinds, parse_spec
>>> kinds.register("files")  # as the stager does for each of its kinds
>>> spec = parse_spec("broadcast to /tmp files { /data/*.cfg }")
>>> spec.blocks[0].dest
'/tmp'
"""
from hooks.errors import SpecError
from hooks.h5entry import H5Selection, Slice
from hooks.parser import load_spec, parse_spec
from hooks.spec import Block, Location, Pattern, Spec

__all__ = ["SpecError", "load_spec", "parse_spec", "Spec", "Block", "Pattern", "Location",
           "H5Selection", "Slice"]
