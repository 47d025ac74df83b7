import sys
from pathlib import Path

# Shared test helpers (tinymodels, firmware_harness) live beside this file.
sys.path.insert(0, str(Path(__file__).parent))


import pytest  # noqa: E402


@pytest.fixture
def one_torch_thread():
    """Tiny torch models on a shared machine: a second thread only waits for the first (10x slower here)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
