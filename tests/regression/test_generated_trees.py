"""Every recorded build's tree is byte-identical to its record
(generated_trees.py says how the record was made and how to update it)."""
import json

import pytest

from generated_trees import CASES, RECORD, tree_hashes


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("generated-trees")


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_generated_tree_matches_its_record(case, work):
    want = json.loads(RECORD.read_text())[case.name]
    got = tree_hashes(case, work)
    changed = sorted(p for p in set(want) | set(got) if want.get(p) != got.get(p))
    assert not changed, (f"{case.name}: {len(changed)} generated files differ from the record "
                         f"(first: {changed[:6]}); if intended, run "
                         "`python tests/regression/generated_trees.py --update` and say why in the commit")
