#!/bin/sh
# Open MPI's remote-shell agent for OS-level nodes on one machine (tests/osnodes.py).
#
#   mpirun --hostfile HOSTS --mca plm_rsh_agent tests/osnode_launch.sh ... CMD
#
# Open MPI "logs in" to each host of HOSTS (nodeA, nodeB, ...) by running
# `AGENT [OPTIONS] HOST ORTED-COMMAND`; instead of ssh, this starts the node's
# daemon (orted, and so every rank it starts) here, in new UTS and mount namespaces:
# the host name becomes HOST, and $OSNODE_ROOT/HOST is bind-mounted over
# $OSNODE_LOCAL, so every node sees its own node-local directory at the same path.
# Open MPI sees separate hosts: ranks of different nodes talk over TCP (loopback),
# not shared memory, as on a cluster. Needs root (or CAP_SYS_ADMIN) for unshare/mount.
while [ "${1#-}" != "$1" ]; do shift; done   # ssh-style options (none expected)
host=$1
shift
: "${OSNODE_ROOT:?set OSNODE_ROOT: the directory holding each node's local directory}"
: "${OSNODE_LOCAL:?set OSNODE_LOCAL: the node-local path every node sees}"
mkdir -p "$OSNODE_ROOT/$host" || exit 1
# The orted command arrives as shell words meant for a remote shell: run it through sh.
exec unshare --uts --mount --propagation private -- /bin/sh -c '
  hostname "$1" && mount --bind "$2/$1" "$3" || exit 1
  shift 3
  exec /bin/sh -c "$*"' osnode "$host" "$OSNODE_ROOT" "$OSNODE_LOCAL" "$@"
