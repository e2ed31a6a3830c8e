#!/usr/bin/env bash
# Run pytest (pytest-mpi, --with-mpi) on one rank of an mpirun job.
# Rank 0 prints to the terminal, so its summary line is the last thing shown;
# the other ranks write .pytest-mpi/rank-N.log. mpirun's exit status is
# non-zero if any rank fails, and tests/mpiutil.assert_all makes a failure on
# one rank a failure on all.
py=$1; shift
rank=${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-0}}
if [ "$rank" = 0 ]; then
  exec "$py" -m pytest --with-mpi --color=no -p no:cacheprovider "$@"
fi
mkdir -p .pytest-mpi
exec "$py" -m pytest --with-mpi --color=no -p no:cacheprovider "$@" >".pytest-mpi/rank-$rank.log" 2>&1
