"""A UDF that stamps ``time.perf_counter()`` per frame: LiberTEM-live's processing window
in ``dectris_legacy_bench.py`` (a module of its own: its executor's workers import it)."""
import time

import numpy as np
from libertem.udf.base import UDF


class StampUDF(UDF):
    def get_result_buffers(self):
        return {"t": self.buffer(kind="nav", dtype=np.float64)}

    def process_frame(self, frame):
        self.results.t[:] = time.perf_counter()
