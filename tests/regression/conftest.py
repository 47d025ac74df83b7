import sys
from pathlib import Path

# The fuzz tier's small model builders are shared with the regression tests.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "fuzz"))
