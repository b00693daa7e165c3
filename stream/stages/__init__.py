"""The per-frame workers between decode and encode: analyse, swap, composite."""
from stream.stages.analyse import AnalyseWorker
from stream.stages.composite import CompositeWorker
from stream.stages.swap import SwapWorker

__all__ = ["AnalyseWorker", "CompositeWorker", "SwapWorker"]
