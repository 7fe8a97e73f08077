"""The pure format layer: headers, index codec and keys, without files."""

from __future__ import annotations

import io
import lzma
import struct
import tarfile

import cbor2
import pytest
from hypothesis import given, settings, strategies as st

from ncore_like import ArchiveFormatError, InvalidKeyError
from ncore_like.archive import is_node_metadata_key
from ncore_like.archive._format import (
    BLOCK_SIZE,
    IndexHeader,
    decode_index,
    encode_index,
    header_checksum,
    member_header,
    pack_index_header,
    tar_end,
    unpack_index_header,
    validate_key,
)


def test_index_header_layout_is_the_documented_struct() -> None:
    block = pack_index_header(10240, 208)
    assert len(block) == BLOCK_SIZE
    assert block[:20] == struct.pack("<4sIQI", b"itar", 1, 10240, 208)
    assert block[20:] == bytes(BLOCK_SIZE - 20)
    assert unpack_index_header(block, "x") == IndexHeader(1, 10240, 208)


def test_header_errors_name_the_archive_and_the_problem() -> None:
    with pytest.raises(ArchiveFormatError, match=r"a\.itar: not an indexed tar archive.*magic"):
        unpack_index_header(bytes(BLOCK_SIZE), "a.itar")
    unknown = struct.pack("<4sIQI", b"itar", 7, 0, 0) + bytes(BLOCK_SIZE - 20)
    with pytest.raises(ArchiveFormatError, match=r"b\.itar: unknown index type 7"):
        unpack_index_header(unknown, "b.itar")
    with pytest.raises(ArchiveFormatError, match="too short"):
        unpack_index_header(b"itar", "c.itar")


def test_index_round_trip_sorts_by_offset_and_is_xz_cbor() -> None:
    data = encode_index(["b", "a", "c"], [2048, 512, 4096], [3, 1, 0])
    table = cbor2.loads(lzma.decompress(data, format=lzma.FORMAT_XZ))
    assert table == {"items": ["a", "b", "c"], "offset_datas": [512, 2048, 4096], "sizes": [1, 3, 0]}
    index = decode_index(data, IndexHeader(1, 8192, len(data)), "x")
    assert (index.keys, index.offsets, index.sizes) == (["a", "b", "c"], [512, 2048, 4096], [1, 3, 0])


@pytest.mark.parametrize(
    ("table", "problem"),
    [
        ({"items": ["a"], "offset_datas": [512]}, "no items"),
        ({"items": ["a"], "offset_datas": [512, 1024], "sizes": [1]}, "1 keys, 2 offsets"),
        ({"items": ["a"], "offset_datas": [512], "sizes": [10_000]}, "past the index"),
        ({"items": ["a"], "offset_datas": [-1], "sizes": [1]}, "entry 'a' .*before the first header"),
        ({"items": [1], "offset_datas": [512], "sizes": [1]}, "wrong type"),
        ({"items": ["a"], "offset_datas": ["512"], "sizes": [1]}, "wrong type"),
        ([1, 2, 3], "no items"),
    ],
)
def test_corrupt_index_tables_are_rejected(table: object, problem: str) -> None:
    data = lzma.compress(cbor2.dumps(table), format=lzma.FORMAT_XZ)
    with pytest.raises(ArchiveFormatError, match=f"arch: corrupt record index.*({problem})"):
        decode_index(data, IndexHeader(1, 2048, len(data)), "arch")


@pytest.mark.parametrize("data", [b"", b"garbage", lzma.compress(b"\xff\xff", format=lzma.FORMAT_XZ)])
def test_undecodable_index_bytes_are_rejected(data: bytes) -> None:
    with pytest.raises(ArchiveFormatError, match="corrupt record index"):
        decode_index(data, IndexHeader(1, 2048, len(data)), "arch")


def test_truncated_xz_stream_is_rejected() -> None:
    data = encode_index(["a"] * 1, [512], [1])
    with pytest.raises(ArchiveFormatError, match="corrupt record index"):
        decode_index(data[:-8], IndexHeader(1, 2048, len(data)), "arch")


@pytest.mark.parametrize("key", ["a", "x" * 100, "y" * 101, "ümlaut/光", "a/b/c.0.1"])
def test_member_headers_are_what_tarfile_writes(key: str) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo(key)
        info.size = 3
        tar.addfile(info, io.BytesIO(b"abc"))
    expected = buffer.getvalue()
    header = member_header(key, 3)
    assert expected.startswith(header + b"abc" + bytes(BLOCK_SIZE - 3))
    # tarfile ends the archive with two zero blocks, padded to 10240 bytes.
    end_offset = len(header) + BLOCK_SIZE
    assert expected[end_offset:] == tar_end(end_offset)


@pytest.mark.parametrize("key", ["", "/abs", "a/../b", "..", "a\0b", "a//b", "a/", "./a", "a/./b"])
def test_invalid_keys_are_rejected_with_the_archive_named(key: str) -> None:
    with pytest.raises(InvalidKeyError, match="^arch: record key"):
        validate_key(key, "arch")


@settings(max_examples=1000, deadline=None)
@given(key=st.text(alphabet="/.\\\0ab", max_size=8))
def test_keys_are_valid_exactly_when_every_component_is_a_name(key: str) -> None:
    # The rules: a relative path of names (no empty, "." or ".." component), no NUL, no
    # backslash.
    valid = bool(key) and "\0" not in key and "\\" not in key and not {"", ".", ".."} & set(key.split("/"))
    if valid:
        assert validate_key(key, "arch") == key
    else:
        with pytest.raises(InvalidKeyError, match="^arch: record key"):
            validate_key(key, "arch")


def test_non_string_keys_are_rejected() -> None:
    with pytest.raises(InvalidKeyError, match="strings"):
        validate_key(b"a", "arch")


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        (".zgroup", True),
        ("a/b/.zarray", True),
        ("a/.zattrs", True),
        (".zmetadata", True),
        ("x/zarr.json", True),
        (".zmetadata.cbor.xz", True),
        ("zarr.json.cbor.zlib", True),
        ("a/0.0", False),
        ("a/c/0/0", False),
        ("a/zarr.json.bak", False),
    ],
)
def test_node_metadata_keys(key: str, expected: bool) -> None:
    assert is_node_metadata_key(key) is expected


@settings(max_examples=300, deadline=None)
@given(
    key=st.text(alphabet=st.characters(min_codepoint=1, max_codepoint=0x2FF), min_size=1, max_size=120),
    size=st.one_of(st.integers(0, 10**7), st.integers(8**11 - 2, 8**11 + 2)),
)
def test_member_headers_equal_tarfile_for_any_key_and_size(key: str, size: int) -> None:
    info = tarfile.TarInfo(key)
    info.size = size
    assert member_header(key, size) == info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")


@settings(max_examples=300, deadline=None)
@given(
    key=st.text(alphabet=st.characters(min_codepoint=1, max_codepoint=0x2FF), min_size=1, max_size=120),
    size=st.one_of(st.integers(0, 10**7), st.integers(8**11 - 2, 8**11 + 2)),
    crc=st.integers(0, 2**32 - 1),
)
def test_member_headers_with_a_crc_are_tarfile_headers_carrying_it(key: str, size: int, crc: int) -> None:
    # tarfile's header with the CRC field filled in and the tar checksum computed over it
    # (tarfile itself validates that checksum when it reads the header back).
    info = tarfile.TarInfo(key)
    info.size = size
    expected = bytearray(info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape"))
    last = len(expected) - BLOCK_SIZE
    expected[last + 500 : last + 512] = b"CRC%08x\0" % crc
    expected[last + 148 : last + 156] = b" " * 8
    expected[last + 148 : last + 155] = b"%06o\0" % sum(expected[last:])
    header = member_header(key, size, crc)
    assert header == bytes(expected)
    assert header_checksum(header[-BLOCK_SIZE:]) == crc
    with tarfile.open(fileobj=io.BytesIO(header + bytes(2 * BLOCK_SIZE)), mode="r:") as tar:
        member = tar.next()
    assert member is not None and member.size == size
    # (tarfile reads a name ending in '/' as a folder's, without it; no record key ends so)
    assert member.name == key or key.endswith("/")
