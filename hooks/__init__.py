"""Hook spec files: what to stage, in the I/O hook format of Wozniak et al. (Figure 6).

>>> from hooks import parse_spec
>>> spec = parse_spec("broadcast to /tmp files { /data/*.cfg }")
>>> spec.blocks[0].dest
'/tmp'
"""
from hooks.errors import SpecError
from hooks.parser import load_spec, parse_spec
from hooks.spec import Block, Location, Pattern, Spec

__all__ = ["SpecError", "load_spec", "parse_spec", "Spec", "Block", "Pattern", "Location",
           "HookContext", "LeaderHooks", "leader_hooks_from", "run_leader_hook"]

# Leader hooks (once per node, barrier before tasks); MPI is imported only when one runs.
from hooks.leader import HookContext, LeaderHooks, leader_hooks_from, run_leader_hook
