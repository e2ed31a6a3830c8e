#!/bin/bash
# Job memory of one ASI TPX3 scan received sparse against the same scan dense (issue 45).
#
# One NYxNY scan of 512x512 frames (our simulator's events) is dumped as a TPX3 stream and
# densified into an HDF5 dataset (<u4). Job A: `mpirun -n 4 stager stream receive
# --protocol asi-tpx3` (2 emulated nodes, 2 receivers + 2 workers) fed by LiberTEM-live's
# own TpxCameraSim replaying the dump; job B: the same job over the native protocol fed
# by `streams.simulate --hdf5` with the dense frames. Both run SumUDF + SumSigUDF with
# 32-frame partitions; every rank's peak RSS (GNU time's %M) is recorded, and the two
# jobs' results are checked bit-equal. Usage: bash bench/asi_tpx3_job_memory.sh [NY]
# (default 16); writes bench/results/asi_tpx3_job_memory.md.
set -euo pipefail
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
HERE=$(cd "$(dirname "$0")" && pwd)
V=$HERE/../.venv/bin
NY=${1:-16}
UDF=udf:libertem.udf.sum:SumUDF,libertem.udf.sumsigudf:SumSigUDF
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cd "$T"
LOAD0=$(cut -d' ' -f1 /proc/loadavg)
$V/python -m streams.simulate --protocol asi-tpx3 --dump scan.tpx3 --scan-shape "$NY" "$NY" >/dev/null
$V/python - <<PY
import h5py, numpy as np, scipy.sparse as sp
from kernels.io.tpx3 import read_stream_file
acq, ip, ix, v = read_stream_file("scan.tpx3")
n = len(ip) - 1
d = sp.csr_matrix((v, ix, ip), shape=(n, 512 * 512)).toarray().astype("<u4")
with h5py.File("dense.h5", "w") as f:
    f["frames"] = d.reshape(n, 512, 512)
PY
PORT=$($V/python -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])")
$V/python -m libertem_live.detectors.asi_tpx3.sim scan.tpx3 --port "$PORT" --cached MEM \
  --sleep 0 >/dev/null 2>&1 &
SIM=$!
sleep 3
mpirun -n 4 /usr/bin/time -f "rss %M" "$V/stager" stream receive --rendezvous sp.json --out sp \
  --emulate-nodes 2 --protocol asi-tpx3 --tpx3-endpoint "127.0.0.1:$PORT" --partition-frames 32 \
  --analysis "$UDF" --scans 1 > sp.log 2>&1 || true
kill $SIM 2>/dev/null || true
$V/python -m streams.simulate --rendezvous de.json --hdf5 dense.h5:/frames --scan-shape "$NY" "$NY" \
  --shape 512 512 --dtype '<u4' --wait 60 >/dev/null 2>&1 &
mpirun -n 4 /usr/bin/time -f "rss %M" "$V/stager" stream receive --rendezvous de.json --out de \
  --emulate-nodes 2 --partition-frames 32 --analysis "$UDF" --scans 1 > de.log 2>&1
wait
LOAD1=$(cut -d' ' -f1 /proc/loadavg)
$V/python - "$HERE/results/asi_tpx3_job_memory.md" "$NY" "$LOAD0" "$LOAD1" <<'PY'
import glob, re, sys
import h5py, numpy as np
out, ny, l0, l1 = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
def rss(log):
    got = sorted(int(m) / 1024 for m in re.findall(r"^rss (\d+)$", open(log).read(), re.M))
    assert len(got) == 4, open(log).read()[-2000:]
    return got
sp, de = rss("sp.log"), rss("de.log")
a = sorted(p for p in glob.glob("sp/*.h5") if ".live" not in p)[0]
b = [p for p in glob.glob("de/*.h5") if ".live" not in p][0]
with h5py.File(a) as f, h5py.File(b) as g:
    equal = all(np.array_equal(f[k][()], g[k][()])
                for k in ("udf/SumUDF/intensity", "udf/SumSigUDF/intensity"))
assert equal, "the sparse and dense jobs disagree"
lines = [f"# ASI TPX3 job memory: one {ny}x{ny} scan of 512x512 frames, sparse vs dense",
         "", "`bench/asi_tpx3_job_memory.sh`: `mpirun -n 4` (2 emulated nodes, 2 receivers, "
         "2 workers), SumUDF + SumSigUDF, 32-frame partitions; sparse: `--protocol asi-tpx3` "
         "from LiberTEM-live's TpxCameraSim; dense: the native protocol, the same frames as "
         "`<u4`. Results bit-equal: yes.", "",
         "| job | peak RSS per rank, MiB (sorted) | sum | largest |", "|---|---|---|---|",
         f"| sparse (CSR) | {', '.join(f'{x:.0f}' for x in sp)} | {sum(sp):.0f} | {max(sp):.0f} |",
         f"| dense | {', '.join(f'{x:.0f}' for x in de)} | {sum(de):.0f} | {max(de):.0f} |",
         "", f"dense / sparse: **{sum(de) / sum(sp):.2f}x** the job's sum, "
         f"**{max(de) / max(sp):.2f}x** its largest rank; the scan is "
         f"{ny * ny} MiB dense; load average {l0} before, {l1} after", ""]
open(out, "w").write("\n".join(lines))
print("\n".join(lines))
PY
