"""scripts/distill_smollm2.py as a module (it is a script, not part of the
package): the recipe tests call its pure helpers."""
import importlib.util
import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def load_recipe():
    sys.path.insert(0, str(SCRIPTS))  # it imports make_corpus beside it
    try:
        spec = importlib.util.spec_from_file_location("distill_smollm2", SCRIPTS / "distill_smollm2.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(SCRIPTS))
