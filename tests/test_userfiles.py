"""The one check of a file a user names: folders, pipes and devices refused without blocking, a
missing file named, a size bounded before and while reading, an output never a device."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from scaling.errors import NotFoundError, SpecError, UserError
from scaling.userfiles import input_file, read_input, refuse_special_output


def test_only_a_regular_file_of_bounded_size_is_read(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)  # opening it would block until a writer came
    for odd in (tmp_path, fifo, Path("/dev/zero")):
        with pytest.raises(SpecError, match=r"^data\.path: .* is not a regular file .*; give a token file$"):
            input_file(odd, "token", error=SpecError, where="data.path")
    with pytest.raises(NotFoundError, match=r"^CSV file not found: .*nope\.csv$"):
        input_file(tmp_path / "nope.csv", "CSV", error=SpecError, missing=NotFoundError)
    big = tmp_path / "big.json"
    with open(big, "wb") as fh:  # sparse: 3 MiB on paper, nothing written
        fh.truncate(3 << 20)
    with pytest.raises(UserError, match=r"is larger than a tokenizer file may be: 3 MiB, more than the 2 MiB allowed"):
        read_input(big, "tokenizer", max_bytes=2 << 20)
    small = tmp_path / "ok.yaml"
    small.write_text("a: 1\n")
    assert input_file(small, "plan") == (small, 5) and read_input(small, "plan", max_bytes=5) == b"a: 1\n"


def test_a_file_whose_size_is_not_told_is_bounded_while_read() -> None:
    status = Path("/proc/self/status")  # stat says 0 bytes; reading gives a page of text
    if not status.is_file() or status.stat().st_size:
        pytest.skip("no procfs here")
    with pytest.raises(UserError, match="is larger than a status file may be: more than the 16 bytes allowed"):
        read_input(status, "status", max_bytes=16)


def test_an_output_is_never_a_device(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"^--output /dev/null: is not a regular file \(a device, pipe or socket\); name a file$"):
        refuse_special_output(Path("/dev/null"), "--output /dev/null", "name a file")
    refuse_special_output(tmp_path / "new.html", "--output new.html", "name a file")  # a new file is fine
