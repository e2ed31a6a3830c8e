"""The end-to-end checksum: incremental == one-shot, files, symlinks refused."""
import os

import pytest

from core import checksum


def test_incremental_equals_one_shot():
    data = os.urandom(1 << 20) + b"tail"
    h = checksum.new()
    for i in range(0, len(data), 12345):
        h.update(memoryview(data)[i:i + 12345])
    assert h.hexdigest() == checksum.hexdigest(data)
    assert h.digest() == checksum.digest(data) and len(h.digest()) == checksum.DIGEST_SIZE
    assert h.nbytes == len(data)
    assert checksum.hexdigest(data[:-1]) != checksum.hexdigest(data)


def test_file_digest_matches_and_refuses_symlinks(tmp_path):
    p = tmp_path / "f"
    data = os.urandom(3 * (1 << 20) + 7)
    p.write_bytes(data)
    assert checksum.file_hexdigest(p, read_size=1 << 20) == checksum.hexdigest(data)
    (tmp_path / "link").symlink_to(p)
    with pytest.raises(OSError):
        checksum.file_hexdigest(tmp_path / "link")


def test_empty():
    assert checksum.hexdigest(b"") == checksum.new().hexdigest()
    assert checksum.ALGORITHM == "xxh3_128"
