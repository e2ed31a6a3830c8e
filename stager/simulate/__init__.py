"""A SimGrid twin of ``stager stage``: the real plan replayed on a simulated machine.

``stager plan SPEC --simulate PLATFORM --nodes N`` asks it what a stage will cost:
predicted transfer time, PFS bytes and metadata operations, a per-phase breakdown and
the naive path (every node reading the PFS itself) beside it.

Modules, in the order a prediction runs them: ``platform`` (the machines, TOML files in
``platforms/`` with the source of every number), ``replay`` (pure: the plan's
operations on N nodes, in rounds, from the stager's own task arithmetic and constants),
``twin`` (the SimGrid actors; ``import simgrid`` only there, in a process of its own),
``predict`` (both paths, side by side; the text and JSON of the command).

How 8,192 nodes fit in seconds: the twin simulates *groups* of nodes (at most 64
actors; on Blue Gene/Q the 128 nodes of one I/O node): a group's activity is the sum of
its nodes', its resources are ``k`` times a node's, so its time is a node's, while the
shared resources (PFS servers, metadata service, I/O nodes, the network's all-to-all
capacity) carry the whole job's load; a plan of more than 64 tasks is replayed in 64
merged rounds. What is modelled and what is not: ``docs/guide/staging.md``, "Predicting
a stage".
"""
from __future__ import annotations

from stager.simulate.platform import PLATFORMS, Platform, PlatformError, load_platform
from stager.simulate.predict import predict, render
from stager.simulate.replay import Scenario, replay

__all__ = ["predict", "render", "replay", "Scenario", "load_platform", "Platform",
           "PlatformError", "PLATFORMS"]
