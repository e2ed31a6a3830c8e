"""``stager stream view RENDEZVOUS [--port P] [--bind HOST] [--out DIR]``: the options
and the entry point (no heavy imports: the stream command's parser imports this)."""
from __future__ import annotations

import argparse
import sys

__all__ = ["add_arguments", "run"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``stager stream view``."""
    p.add_argument("source", metavar="RENDEZVOUS", help="the job's rendezvous file")
    p.add_argument("--port", type=int, default=0, help="port to listen on (default: any free)")
    p.add_argument("--bind", default="127.0.0.1", metavar="HOST",
                   help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--out", metavar="DIR", help="the job's --out (its reports, rejections)")
    p.add_argument("--certificate", metavar="FILE", help="a viewer's certificate "
                   "(.key_secret; default: the viewers' one the rendezvous file names)")
    p.add_argument("--trust-owner", metavar="USER", action="append",
                   help="also trust a rendezvous file of USER (a colleague's job; default: "
                        "only your own)")
    p.add_argument("--wait", type=float, default=None, metavar="S",
                   help="wait up to S s for the rendezvous file to appear, or for a new job's "
                        "when it names a job that has ended (default: an error at once)")


def run(args: argparse.Namespace) -> int:
    """``stager stream view``: exit 0 after SIGINT/SIGTERM, 2 when the job cannot be read."""
    from streams.errors import StreamError
    from streams.view.server import serve

    try:
        serve(args.source, args.port, args.bind, args.certificate, args.out,
              on_ready=lambda url: print(f"stager stream view: {url}", flush=True),
              trust_owner=args.trust_owner, wait=args.wait)
    except (OSError, ValueError, StreamError) as e:
        print(f"stager stream view: {e}", file=sys.stderr)
        return 2
    return 0
