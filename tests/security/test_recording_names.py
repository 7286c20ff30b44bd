"""A stream's name comes from any user (POST /api/v1/keys, 80 characters), the recording
folder from an admin: the file a recording is written to must stay inside that folder
whatever the name holds (``../``, slashes, NUL, dots, non-ASCII)."""

from __future__ import annotations

import pytest

from streamer.live.flv_file import MAX_NAME_CHARS, FlvFileWriter, recording_path, safe_file_stem
from streamer.rtmp.handler import MediaMessage

HOSTILE_NAMES = [
    "../../escape",
    "../../../../../../tmp/escape",
    "/etc/passwd",
    "a/../../b",
    "..",
    ".hidden",
    "name\x00.flv",
    "back\\slash\\..\\..\\x",
    "~root",
    "con:stream?*<>|",
    "Zoë's stream ☃",
    "x" * 200,
    "",
    "   ",
]


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_a_hostile_stream_name_records_inside_the_folder(tmp_path, name):
    folder = tmp_path / "recordings"
    path = recording_path(str(folder), name, "20261201-120000")
    assert path.parent == folder
    assert path.name.endswith("-20261201-120000.flv")
    writer = FlvFileWriter(path)  # creates the folder; "xb": never over an existing file
    writer.write(MediaMessage("data", 0, b"\x02\x00\x0aonMetaData"))
    writer.close()
    assert [p.name for p in tmp_path.rglob("*.flv")] == [path.name]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["recordings"]


def test_safe_names_keep_what_they_can():
    assert safe_file_stem("../../escape") == "escape"
    assert safe_file_stem("/etc/passwd") == "etc_passwd"
    assert safe_file_stem("Zoë's stream") == "Zoe_s_stream"
    assert safe_file_stem("studio-cam_2.main") == "studio-cam_2.main"
    assert safe_file_stem("...") == "stream"
    assert len(safe_file_stem("x" * 200)) == MAX_NAME_CHARS


def test_two_recordings_of_one_name_do_not_overwrite(tmp_path):
    first = recording_path(str(tmp_path), "../cam", "t")
    FlvFileWriter(first).close()
    second = recording_path(str(tmp_path), "cam", "t")
    assert first.parent == second.parent == tmp_path and first != second
