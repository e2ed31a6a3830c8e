"""The one options resolver (core/options.py): keyword > environment > default, strict."""
from dataclasses import fields

import pytest

from core.nodes import NODE_ID, node_id_of, parse_node_id, resolve_node_id
from stager.staging.options import STAGE_OPTIONS, StageOptions, resolve_options
from core.options import Option, parse_int, resolve

TABLE = (Option("count", 3, parse_int(1, 10), "T_COUNT"), Option("name", "x", str))


def test_keyword_then_environment_then_default():
    assert resolve(TABLE, {}, env={}) == {"count": 3, "name": "x"}
    assert resolve(TABLE, {}, env={"T_COUNT": "7"})["count"] == 7
    assert resolve(TABLE, {"count": 2}, env={"T_COUNT": "7"})["count"] == 2
    # None and an empty variable count as not given
    assert resolve(TABLE, {"count": None}, env={"T_COUNT": ""})["count"] == 3
    # an option without a variable ignores the environment
    assert resolve(TABLE, {}, env={"NAME": "y"})["name"] == "x"


def test_strict_parsing_names_the_keyword_or_variable():
    with pytest.raises(ValueError, match=r"T_COUNT"):
        resolve(TABLE, {}, env={"T_COUNT": "7.5"})
    with pytest.raises(ValueError, match=r"count must be >= 1 and <= 10"):
        resolve(TABLE, {"count": 11}, env={})
    with pytest.raises(ValueError, match=r"count must be an integer"):
        resolve(TABLE, {"count": True}, env={})
    with pytest.raises(TypeError, match=r"unknown option\(s\): cuont; known: count, name"):
        resolve(TABLE, {"cuont": 1}, env={})


@pytest.mark.parametrize("text,want", [("host", "host"), ("env:SLURMD_NODENAME",
                                       "env:SLURMD_NODENAME"), ("emulate:3", "emulate:3"),
                                      (" emulate:04 ", "emulate:4")])
def test_node_id_parses(text, want):
    assert parse_node_id(text) == want


@pytest.mark.parametrize("bad", ["", "hosts", "env:", "env:A=B", "env:1X", "emulate:0",
                                 "emulate:x", "emulate:", "rack:2"])
def test_node_id_refuses(bad):
    with pytest.raises(ValueError, match="node_id|emulate"):
        parse_node_id(bad)


def test_older_spellings_map_onto_node_id():
    import argparse

    from core.nodes import add_node_id_flags

    assert node_id_of({}) is None
    assert node_id_of({"emulate_nodes": 2}) == node_id_of({"node_id": "emulate:2"}) == "emulate:2"
    assert node_id_of({"node_id_env": "SLURMD_NODENAME"}) == "env:SLURMD_NODENAME"
    with pytest.raises(ValueError, match="either"):
        node_id_of({"emulate_nodes": 2, "node_id_env": "X"})
    with pytest.raises(ValueError, match="either"):
        node_id_of({"node_id": "host", "emulate_nodes": 2})
    with pytest.raises(ValueError):
        node_id_of({"emulate_nodes": "0"})
    # the command line: one of the three flags, read back from the namespace
    p = argparse.ArgumentParser()
    add_node_id_flags(p)
    assert node_id_of(p.parse_args(["--emulate-nodes", "3"])) == "emulate:3"
    assert node_id_of(p.parse_args(["--node-id-env", "V"])) == "env:V"
    assert node_id_of(p.parse_args(["--node-id", "host"])) == "host"
    assert node_id_of(p.parse_args([])) is None


def test_node_id_resolution():
    assert resolve_node_id(env={}) == NODE_ID.default == "host"
    assert resolve_node_id(env={"STAGER_NODE_ID": "emulate:2"}) == "emulate:2"
    assert resolve_node_id(env={"STAGER_NODE_ID": "emulate:2"}, node_id="env:V") == "env:V"
    # the older variables still work, below the new one
    assert resolve_node_id(env={"STAGER_EMULATE_NODES": "3"}) == "emulate:3"
    assert resolve_node_id(env={"STAGER_NODE_ID_ENV": "V", "STAGER_NODE_ID": "host"}) == "host"
    with pytest.raises(ValueError, match="STAGER_NODE_ID"):
        resolve_node_id(env={"STAGER_NODE_ID": "emulate:none"})


def test_staging_options_are_one_table():
    from stager.planning.kinds import options

    names = [f.name for f in fields(StageOptions) if f.name != "kind_options"]
    assert [o.name for o in STAGE_OPTIONS] == names
    assert all(o.env == "STAGER_" + o.name.upper() for o in STAGE_OPTIONS + options())
    # the kinds' options are rows of their own kinds, not fields of the staging options
    own = {o.name: o.default for o in options()}
    assert {"h5_memory", "h5_inline_bytes", "shared_exchange"} <= set(own)
    assert not set(own) & set(names), own
    assert resolve_options(env={}) == StageOptions(kind_options=own)
    o = resolve_options(env={"STAGER_H5_MEMORY": "128K"}, shared_exchange=False)
    assert o.kind_options["h5_memory"] == 128 << 10
    assert o.kind_options["shared_exchange"] is False
    with pytest.raises(ValueError, match="h5 memory cap"):
        resolve_options(env={}, h5_memory="1K")
    o = resolve_options(env={"STAGER_WAIT": "forever", "STAGER_NODE_ID": "env:H"})
    assert o.wait == -1.0 and "node_id" not in names   # how ranks form nodes: the job's


def test_mpi_executor_options_use_the_resolver():
    from workflows.errors import ExecutorError
    from workflows.executors.mpi import executor as mx

    env = {mx.ENV_DISPATCH: "nodes", mx.ENV_MAX_CHUNK: "8", mx.ENV_ARRAYS: "off"}
    o = mx.resolve_options(env=env)
    assert (o["dispatch"], o["max_chunk"], o["arrays"], o["window"]) == ("nodes", 8, False, 0)
    assert mx.resolve_options(env=env, dispatch="central", arrays=True)["dispatch"] == "central"
    for var, bad in ((mx.ENV_DISPATCH, "both"), (mx.ENV_MAX_CHUNK, "0"),
                     (mx.ENV_ARRAYS, "maybe"), (mx.ENV_LOCALITY_WAIT, "nan")):
        with pytest.raises(ExecutorError, match=var):
            mx.resolve_options(env={var: bad})


def test_stream_session_options_use_the_resolver():
    from streams.job.session import SESSION_OPTIONS, SessionOptions

    # every field but the protocol's own options (declared by the protocol) and the
    # pixel mask a detector control hands in (an array: no flag, no variable)
    assert {o.name for o in SESSION_OPTIONS} == \
        set(SessionOptions.__dataclass_fields__) - {"protocol_options", "detector_pixel_mask"}
    assert "STAGER_STREAM_DETECTOR_PIXEL_MASK" not in {o.env for o in SESSION_OPTIONS}
    mask = SessionOptions.resolve(env={}, rendezvous="/r", out="/o",
                                  detector_pixel_mask=[[True]]).detector_pixel_mask
    assert mask == [[True]]
    env = {"STAGER_STREAM_CREDIT": "4", "STAGER_STREAM_MEMORY_BYTES": "1M",
           "STAGER_STREAM_SCANS": "9"}
    o = SessionOptions.resolve(env=env, rendezvous="/r", out="/o", scans=2, idle_timeout="5",
                               analysis_options={"threshold": 3})
    assert (o.credit, o.memory_bytes, o.scans) == (4, 1 << 20, 2)
    assert o.analysis_options == {"threshold": 3}
    assert (o.idle_timeout, o.close_wait, o.heartbeat) == (5.0, 5.0, 0.25)  # close_wait follows
    a = SessionOptions.resolve(env={}, rendezvous="/r", out="/o")
    a.analysis_options["k"] = 1
    assert SessionOptions.resolve(env={}, rendezvous="/r", out="/o").analysis_options == {}
    for var, bad in (("STAGER_STREAM_CREDIT", "0"), ("STAGER_STREAM_HEARTBEAT", "-1"),
                     ("STAGER_STREAM_ALLOW_LOSS", "1.5"), ("STAGER_STREAM_RATE", "fast")):
        with pytest.raises(ValueError, match="allow-loss" if "LOSS" in var else var):
            SessionOptions.resolve(env={var: bad}, rendezvous="/r", out="/o")
    with pytest.raises(ValueError, match="rendezvous"):
        SessionOptions.resolve(env={}, out="/o")
