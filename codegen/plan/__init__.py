"""Static memory planning: LoweredStep -> MemoryPlan.

lifetimes.py derives every run-time buffer and its live range from the
step's calls (analysis), placer.py is the pure offset-assignment algorithm,
memory.py places one step at one context in the board's regions and says
what is over; codesize.py and weights_size.py estimate the code flash and
the weights blob; report.py and human.py explain a plan."""
