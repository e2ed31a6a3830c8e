"""A deliberately slow analysis for the back-pressure test: the per-frame sum, plus a sleep."""
import time

from analyses.contract import FrameSum


class Slow(FrameSum):
    name = "slow-sum"

    def __init__(self, seconds: float = 0.02):
        self.seconds = seconds

    def process_partition(self, frames, positions, complete):
        time.sleep(self.seconds)
        return super().process_partition(frames, positions, complete)


ANALYSIS = Slow
