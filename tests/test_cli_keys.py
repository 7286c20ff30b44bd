"""`swapcast keys add | list | revoke`: keys persist, are shown once, may be made of several
photos of one person, and bad input is refused."""

import pytest

from signaling.stream_keys import StreamKeyStore, hash_key
from streamer.media.images import write_image
from swapcast.cli import main


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("SWAPCAST_SERVER__DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


@pytest.fixture
def face(tmp_path, astronaut_image):
    path = tmp_path / "face.png"
    write_image(path, astronaut_image)
    return path


def test_add_list_revoke_round_trip(data_dir, face, capsys):
    assert main(["keys", "add", "--source", str(face), "--name", "studio", "--push", "rtmp://127.0.0.1:1935/live/x",
                 "--blend", "0.7", "--mouth-mask"]) == 0
    key = capsys.readouterr().out.splitlines()[0]
    assert key.startswith("sk_") and len(key) > 30
    stored = (data_dir / "stream-keys.db").read_bytes()
    assert key.encode() not in stored and hash_key(key).encode() in stored  # only the hash is kept
    record = StreamKeyStore(data_dir).find(key)
    assert record.stream.name == "studio" and record.stream.push == ("rtmp://127.0.0.1:1935/live/x",)
    assert record.stream.swap == {"blend": 0.7, "mouth_mask": True}
    assert record.stream.source_face.startswith(str(data_dir))

    assert main(["keys", "list"]) == 0
    listing = capsys.readouterr().out
    assert record.key_id in listing and "studio" in listing and "active" in listing

    assert main(["keys", "revoke", record.key_id]) == 0
    assert StreamKeyStore(data_dir).find(key) is None
    main(["keys", "list"])
    assert "revoked" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--push", "http://example.invalid/x"], "expected rtmp://"),
        (["--blend", "3"], "swap.blend"),
    ],
)
def test_bad_keys_are_refused(data_dir, face, capsys, extra, needle):
    assert main(["keys", "add", "--source", str(face), *extra]) == 2
    assert needle in capsys.readouterr().err
    assert not (data_dir / "stream-keys.db").exists() or StreamKeyStore(data_dir).list() == []


def test_a_source_without_a_face_is_refused(data_dir, tmp_path, capsys):
    import numpy as np

    blank = tmp_path / "blank.png"
    write_image(blank, np.full((200, 200, 3), 127, np.uint8))
    assert main(["keys", "add", "--source", str(blank)]) == 2
    assert "no face" in capsys.readouterr().err


def test_revoking_an_unknown_id(data_dir, capsys):
    assert main(["keys", "revoke", "nope"]) == 2
    assert "no stream key with id 'nope'" in capsys.readouterr().err


@pytest.fixture
def mirrored_face(tmp_path, astronaut_image):
    """Another photo of the same person: the mirror image."""
    import numpy as np

    path = tmp_path / "face-mirrored.png"
    write_image(path, np.ascontiguousarray(astronaut_image[:, ::-1]))
    return path


def test_a_key_is_made_of_several_photos_of_one_person(data_dir, face, mirrored_face, engine, capsys):
    import asyncio
    from contextlib import closing

    from streamer.faces import FaceLibrary

    assert main(["keys", "add", "--source", str(face), "--source", str(mirrored_face)]) == 0
    key = capsys.readouterr().out.splitlines()[0]
    stream = StreamKeyStore(data_dir).find(key).stream
    assert stream.name == "face" and len(stream.source_photos) == 2
    assert all(photo.startswith(str(data_dir)) for photo in stream.source_photos)  # both copied into the store
    assert main(["keys", "list"]) == 0
    assert " photos=2" in capsys.readouterr().out
    with closing(FaceLibrary(engine)) as library:
        worn = asyncio.run(library.for_stream(stream))  # what an RTMP/WHIP publisher's session wears
    assert worn.photo_count == 2


def test_a_key_photo_of_someone_else_is_refused(data_dir, face, tmp_path, grace_image, capsys):
    grace = tmp_path / "grace.png"
    write_image(grace, grace_image)
    assert main(["keys", "add", "--source", str(face), "--source", str(grace)]) == 2
    err = capsys.readouterr().err
    assert f"source {grace} shows someone else than the photos before it" in err and "Traceback" not in err
    assert not (data_dir / "stream-keys.db").exists() or StreamKeyStore(data_dir).list() == []
