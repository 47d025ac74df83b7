"""Static memory planning: QuantizedGraph -> MemoryPlan.

lifetimes.py finds every run-time buffer and its live range, placer.py is
the pure offset-assignment algorithm, memory.py ties them to a RAM budget
and explains what fits when the model does not."""
from .lifetimes import BufferRequest, Lifetimes, find_lifetimes
from .memory import MemoryPlan, PlacedBuffer, plan_memory

__all__ = ["BufferRequest", "Lifetimes", "find_lifetimes", "MemoryPlan", "PlacedBuffer", "plan_memory"]
