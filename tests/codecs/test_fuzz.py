"""Bounded run of the decoder fuzzer (tests/helpers/fuzz_decoders.py) over every codec family: no
crash, no write outside an output buffer, no untyped error. Under scripts/sanitize.sh the
same run is checked by AddressSanitizer and UndefinedBehaviorSanitizer."""
import pytest

from helpers.fuzz_decoders import FAMILY_SPECS, fuzz


@pytest.mark.parametrize("family", sorted(FAMILY_SPECS))
def test_fuzz_family(family):
    specs = FAMILY_SPECS[family]
    assert fuzz(specs, iterations=1000, seed=2026) == 1000 * len(specs)
