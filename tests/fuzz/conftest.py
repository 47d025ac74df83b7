"""The fuzz tier (marker `fuzz`): every test under tests/fuzz is marked, so
`pytest -m fuzz` runs just this tier and `-m "not fuzz"` skips it."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.fuzz)
