"""The one message loop of every MPI role (the executor's root, task servers, workers; a
receiving job's receivers, workers, rank 0): a :class:`Loop` over a :class:`Link` with a
handler per tag it takes, named after it (``recv_done(src, payload)`` for ``DONE``; a tag
without one is a protocol bug, said once and dropped), its work in :meth:`Loop.step`
(which calls :meth:`Loop.poll` where its messages belong), :meth:`Loop.until` and
:meth:`Loop.idle`. Nothing here imports mpi4py.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Dict, Optional

from core.mpi.link import TAGS, Backoff, Link

__all__ = ["Loop", "handlers"]


def handlers(obj: Any, loop: str) -> Dict[int, Callable[[int, Any], None]]:
    """Tag number -> ``obj``'s bound handler (``recv_<tag name>``) in ``loop``. Pure.

    Raises ValueError for a handler named after no tag of the loop (a typo would
    leave its messages unhandled); KeyError for an unknown loop.
    """
    tags = {name.lower(): tag for name, tag in TAGS[loop].items()}
    out = {}
    for attr in dir(type(obj)):
        if attr.startswith("recv_"):
            name = attr[5:]
            if name not in tags:
                raise ValueError(f"{type(obj).__name__}.{attr}: the {loop} loop has no tag "
                                 f"{name.upper()} (its tags: {', '.join(TAGS[loop])})")
            out[tags[name]] = getattr(obj, attr)
    return out


class Loop:
    """One rank's loop over ``link`` (see the module docstring); ``backoff``: its idle waits."""

    def __init__(self, link: Link, backoff: Optional[Backoff] = None) -> None:
        self.link = link
        self.backoff = backoff or Backoff()
        self._handlers = handlers(self, link.loop)
        self._warned = False

    def run(self) -> None:
        """Turn until :meth:`until`: a step, completed sends forgotten, a wait if idle."""
        while not self.until():
            progress = self.step()
            self.link.reap()
            if progress:
                self.backoff.reset()
            else:
                self.idle()

    def step(self) -> bool:
        """One turn of the role's work, :meth:`poll` included; True if anything happened."""
        return self.poll()

    over = False   # set when the loop is over (see :meth:`until`)

    def until(self) -> bool:
        """True when the loop is over (by default: :attr:`over`)."""
        return self.over

    def idle(self) -> None:
        """Wait after a turn that did nothing."""
        self.backoff.sleep()

    def poll(self) -> bool:
        """Every waiting message to its handler; True if there was any."""
        got = False
        for msg in iter(self.link.poll, None):
            got = True
            self.handle(*msg)
        return got

    def handle(self, src: int, tag: int, payload: Any) -> None:
        """One message to its handler (also a rank's message to itself, never sent)."""
        handler = self._handlers.get(tag)
        if handler is None:
            self.unexpected(src, tag)
        else:
            handler(src, payload)

    def unexpected(self, src: int, tag: int) -> None:
        """A message this rank should never get (a protocol bug): said once, dropped."""
        if not self._warned:
            self._warned = True
            tag_name = self.link.names.get(tag, tag)
            self.say(f"{self.who}: dropped an unexpected message (tag {tag_name} from rank "
                     f"{src}); please report this as a bug")

    @property
    def who(self) -> str:
        return f"rank {self.link.comm.Get_rank()} of the {self.link.loop} loop"

    def say(self, text: str) -> None:
        """One message on stderr, written at once (not through Python's buffers)."""
        try:
            os.write(2, (text.rstrip("\n") + "\n").encode(errors="replace"))
        except OSError:
            pass
