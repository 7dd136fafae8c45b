import pytest

from servefit.errors import ConfigError, InvalidArgumentError
from servefit.units import GIB_BYTES, cdiv, dtype_bytes, parse_bytes, round_up


def test_cdiv_and_round_up():
    assert cdiv(8192, 16) == 512
    assert cdiv(8193, 16) == 513
    assert cdiv(0, 16) == 0
    assert round_up(151_936, 64) == 151_936
    assert round_up(201_088 + 1, 64) == 201_152


def test_parse_bytes_units_are_not_confused():
    assert parse_bytes("44981556224") == 44_981_556_224
    assert parse_bytes("2GiB") == 2 * GIB_BYTES
    assert parse_bytes("2 GB") == 2_000_000_000
    assert parse_bytes("41.89GiB") == int(41.89 * GIB_BYTES)


@pytest.mark.parametrize("text", ["", "lots", "12 parsecs", "-5GiB"])
def test_parse_bytes_rejects_nonsense(text):
    with pytest.raises(InvalidArgumentError, match="not a size"):
        parse_bytes(text)


def test_dtype_bytes():
    assert dtype_bytes("bfloat16") == 2
    assert dtype_bytes("torch.float32") == 4
    assert dtype_bytes("fp8_e4m3") == 1
    with pytest.raises(ConfigError, match="unknown dtype"):
        dtype_bytes("float7")
