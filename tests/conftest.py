import sys
from pathlib import Path

# Shared test helpers (tinymodels, firmware_harness) live beside this file.
sys.path.insert(0, str(Path(__file__).parent))
