"""Host tier: generated C built with the host gcc == numpy reference, token for token."""
import pytest

from firmware_harness import CASES, GREEDY, TOP_P, assert_identical, build_case, need

pytestmark = pytest.mark.host


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("host-bit-exact")


@pytest.mark.parametrize("shape,group", CASES)
def test_host_build_matches_reference(root, shape, group):
    need("cmake")
    built = build_case(root, shape, group, "host")
    assert_identical(built, group, GREEDY)
    assert_identical(built, group, TOP_P)


@pytest.mark.parametrize("shape,group", [CASES[0], CASES[3]])
def test_host_build_of_m7_layout_matches_reference(root, shape, group):
    """The q4x4 layout and its C twin (what the M7 assembly is checked against)."""
    need("cmake")
    built = build_case(root, shape, group, "host", kernels="cortex-m7")
    assert_identical(built, group, GREEDY)
    assert_identical(built, group, TOP_P)
