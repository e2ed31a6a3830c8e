"""The one message loop of the project's MPI roles: answer messages, work, reap, back off.

Every rank of the mpi executor (root, task servers, workers) and of a receiving
job (receivers, workers, rank 0) runs a :class:`Loop` over its
:class:`~stager.mpi.link.Link`. A role is a subclass with

* one handler per tag it takes, named after the tag in :data:`~stager.mpi.link.TAGS`
  (``recv_done(src, payload)`` for ``DONE``); a message whose tag has no handler
  on this rank is a protocol bug, said once on stderr and dropped
  (:meth:`Loop.unexpected`);
* :meth:`Loop.step`, one turn of its own work, which calls :meth:`Loop.poll`
  (every waiting message to its handler) where its messages belong in the turn;
* :meth:`Loop.until`, when to leave, and :meth:`Loop.idle`, how to wait when a
  turn did nothing (sleep, backing off; a rank whose socket waited in
  :meth:`step` only lengthens the next wait).

Nothing here imports mpi4py: the link is a parameter.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Dict, Optional

from stager.mpi.link import TAGS, Backoff, Link

__all__ = ["Loop", "handlers"]

#: A handler's name is this plus the tag's name in lower case.
PREFIX = "recv_"


def handlers(obj: Any, loop: str) -> Dict[int, Callable[[int, Any], None]]:
    """Tag number -> ``obj``'s bound handler, for the tags of ``loop`` it has one for. Pure.

    Raises
    ------
    ValueError
        An unknown loop, or a handler named after no tag of the loop (a typo would
        leave its messages unhandled).
    """
    if loop not in TAGS:
        raise ValueError(f"no message loop {loop!r}: expected one of {', '.join(TAGS)}")
    tags = {name.lower(): tag for name, tag in TAGS[loop].items()}
    out = {}
    for attr in dir(type(obj)):
        if attr.startswith(PREFIX):
            name = attr[len(PREFIX):]
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

    def until(self) -> bool:
        """True when the loop is over."""
        raise NotImplementedError

    def idle(self) -> None:
        """Wait after a turn that did nothing."""
        self.backoff.sleep()

    def poll(self) -> bool:
        """Every waiting message to its handler; True if there was any."""
        got = False
        while (msg := self.link.poll()) is not None:
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
            name = self.link.names.get(tag, tag)
            self.say(f"{self.who}: dropped an unexpected message (tag {name} from rank {src}); "
                     "please report this as a bug")

    @property
    def who(self) -> str:
        return f"rank {self.link.comm.Get_rank()} of the {self.link.loop} loop"

    def say(self, text: str) -> None:
        """One message on stderr, written at once (not through Python's buffers)."""
        try:
            os.write(2, (text.rstrip("\n") + "\n").encode(errors="replace"))
        except OSError:
            pass
