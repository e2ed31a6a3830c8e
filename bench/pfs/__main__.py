"""``python -m bench.pfs``: serve, mount, unmount or list simulated PFS mounts.

- ``serve SRC MNT``  run the daemon in the foreground (Ctrl-C unmounts; counters to --counters);
- ``mount SRC MNT``  start the daemon in the background and return once mounted;
- ``umount MNT``     unmount (lazily if busy; works on a dead daemon's mount too);
- ``status [DIR]``   list FUSE mounts at or below DIR (default /).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

from .mount import (
    PFSConfig,
    PFSError,
    force_unmount,
    fuse_mounts_under,
    is_mounted,
    serve,
)


def _config_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("source")
    p.add_argument("mountpoint")
    p.add_argument("--bandwidth", type=float, default=None,
                   help="aggregate read cap, bytes/s "
                        "(default $SIMPFS_BANDWIDTH or 400e6; 0 = none)")
    p.add_argument("--latency", type=float, default=None,
                   help="seconds per metadata op (default $SIMPFS_LATENCY or 0.002)")
    p.add_argument("--mds-slots", type=int, default=None,
                   help="metadata ops served at once (default $SIMPFS_MDS_SLOTS or 1)")
    p.add_argument("--burst", type=float, default=None, help="token bucket depth, bytes")
    p.add_argument("--max-threads", type=int, default=None, help="libfuse worker threads (64)")
    p.add_argument("--allow-other", action="store_true", default=None,
                   help="let other users read the mount")
    p.add_argument("--counters", default=None, help="write the counters here as JSON at unmount")


def _config(a: argparse.Namespace) -> PFSConfig:
    return PFSConfig.resolve(bandwidth=a.bandwidth, latency=a.latency, mds_slots=a.mds_slots,
                             burst=a.burst, max_threads=a.max_threads, allow_other=a.allow_other)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pfs", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_serve = sub.add_parser("serve", help="run the daemon in the foreground")
    _config_args(p_serve)
    p_serve.add_argument("--watch-parent", action="store_true",
                         help="unmount when the parent process exits")
    _config_args(sub.add_parser("mount", help="start the daemon in the background"))
    sub.add_parser("umount", help="unmount").add_argument("mountpoint")
    p_status = sub.add_parser("status", help="list FUSE mounts")
    p_status.add_argument("directory", nargs="?", default="/")
    a = parser.parse_args(argv)
    try:
        if a.cmd == "serve":
            serve(a.source, a.mountpoint, _config(a), a.counters, a.watch_parent)
        elif a.cmd == "mount":
            _config(a)  # validate here, so a bad option fails in the foreground
            cmd = [sys.executable, "-m", "bench.pfs", "serve", *sys.argv[2:]]
            # The daemon must not hold our stdout/stderr open, or a caller that
            # captures them would wait for it to exit.
            proc = subprocess.Popen(cmd, start_new_session=True, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            while not is_mounted(a.mountpoint):
                if proc.poll() is not None:
                    raise PFSError(f"daemon exited with {proc.returncode} before mounting; "
                                   f"run `python -m bench.pfs serve ...` to see its error")
                time.sleep(0.05)
            print(f"mounted {a.source} at {a.mountpoint} (daemon pid {proc.pid})")
        elif a.cmd == "umount":
            force_unmount(a.mountpoint)
        else:
            for point in fuse_mounts_under(os.path.realpath(a.directory)):
                print(point)
    except PFSError as exc:
        print(f"bench.pfs: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
