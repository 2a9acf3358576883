"""--max-memory sizes: what parses, and one-line errors for what does not."""

import pytest

from effdepth.errors import EffdepthError
from effdepth.options.checks import parse_bytes


@pytest.mark.parametrize("value,size", [("4GiB", 4 << 30), ("500MB", 500_000_000), ("1e9", 10**9), (1024, 1024)])
def test_sizes_parse(value, size):
    assert parse_bytes(value) == size


@pytest.mark.parametrize("value", ["1.2.3GB", ".", "1e999", float("inf"), float("nan"), "4 furlongs", "0", -1])
def test_a_size_that_is_not_one_is_a_one_line_error(value):
    with pytest.raises(EffdepthError, match="--max-memory must be") as e:
        parse_bytes(value)
    assert "\n" not in str(e.value)
