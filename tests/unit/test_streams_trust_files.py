"""The checks of the files a receiving job relies on (no MPI, no sockets): the
``--authorized-keys`` directory, the node-local directory, the refusal summary."""
from __future__ import annotations

import os

import pytest

from core.localfs import UnsafePathError
from streams.job.localdir import local_root, node_local_dir
from streams.security import check_authorized_keys, refusal_address, refusals_line


def _keys(tmp_path):
    import zmq.auth

    d = tmp_path / "keys"
    d.mkdir(mode=0o700)
    zmq.auth.create_certificates(str(d), "beamline")
    return d


def test_authorized_keys_of_one_s_own_pass_and_writable_ones_are_refused(tmp_path):
    d = _keys(tmp_path)
    check_authorized_keys(str(d))
    os.chmod(d, 0o770)
    with pytest.raises(ValueError, match=f"{d}: it is writable by group"):
        check_authorized_keys(str(d))
    os.chmod(d, 0o755)
    os.chmod(d / "beamline.key", 0o646)
    with pytest.raises(ValueError, match="beamline.key: it is writable by others"):
        check_authorized_keys(str(d))
    os.chmod(d / "beamline.key", 0o644)
    os.symlink("/etc/hostname", d / "planted.key")
    with pytest.raises(ValueError, match="planted.key is not a regular file"):
        check_authorized_keys(str(d))
    os.unlink(d / "planted.key")
    if os.geteuid() == 0:        # chown needs root
        os.chown(d / "beamline.key", 65534, 65534)
        with pytest.raises(ValueError, match="owned by uid 65534"):
            check_authorized_keys(str(d))
    with pytest.raises(ValueError, match="not a directory"):
        check_authorized_keys(str(tmp_path / "none"))


def test_local_root_is_the_directory_above_the_first_node_component():
    assert local_root("/a/b/%n/c") == "/a/b"
    assert local_root("/a/x%n/c") == "/a"
    assert local_root("/a/b") == "/a/b"
    assert local_root("/%n") == "/"


def test_node_local_dir_made_private_and_foreign_levels_refused(tmp_path):
    p = node_local_dir(f"{tmp_path}/local/%n/out", "node3", create=True)
    assert p == f"{tmp_path}/local/node3/out"
    assert all(os.stat(d).st_mode & 0o777 == 0o700
               for d in (tmp_path / "local", tmp_path / "local" / "node3", p))
    os.chmod(tmp_path / "local" / "node3", 0o777)
    with pytest.raises(UnsafePathError, match="local/node3: it is writable by group and"):
        node_local_dir(f"{tmp_path}/local/%n/out", "node3", create=False)
    os.chmod(tmp_path / "local" / "node3", 0o700)
    os.chmod(tmp_path / "local", 0o1777)     # a /tmp-like level above the node's: allowed
    assert node_local_dir(f"{tmp_path}/local/%n/out", "node3", create=False) == p
    os.chmod(tmp_path / "local", 0o777)      # without the sticky bit: not
    with pytest.raises(UnsafePathError, match="writable by group and others"):
        node_local_dir(f"{tmp_path}/local/%n/out", "node3", create=False)
    os.chmod(tmp_path / "local", 0o700)
    os.symlink(tmp_path / "local" / "node3", tmp_path / "local" / "node4")
    with pytest.raises(UnsafePathError, match="symlink"):
        node_local_dir(f"{tmp_path}/local/%n/out", "node4", create=True)
    # nothing is created when only checking
    assert node_local_dir(f"{tmp_path}/other/%n", "n", create=False) == f"{tmp_path}/other/n"
    assert not (tmp_path / "other").exists()


def test_refusals_line_names_addresses_and_causes():
    assert refusal_address("NULL connection from 127.0.0.1, allowed: 10.0.0.1") == "127.0.0.1"
    assert refusal_address("a peer without CURVE connected to tcp://x:1") is None
    line = refusals_line({("address_not_allowed", "127.0.0.1"): 36,
                          ("address_not_allowed", "10.1.1.1"): 1,
                          ("not_curve", ""): 1})
    assert line == ("37 connections from 10.1.1.1, 127.0.0.1 refused by --allow-from; "
                    "1 connection refused (not CURVE)")
    assert refusals_line({}) == ""
