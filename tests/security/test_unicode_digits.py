"""Numbers a client or operator writes are ASCII digits, read by one parser
(``signaling.numbers``): ``str.isdigit()`` takes '¹', '②' and '𐩀' and then ``int()``
raises (round 3: a 500 with a traceback from an anonymous thumbnail link), while fullwidth
and Arabic-Indic digits were silently read as numbers."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from signaling.auth.signed_urls import SignedUrlError, UrlSigner
from swapcast.config import ConfigError, load_config

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "webrtc"))
from webrtc_harness import client_peer, camera_offer, node, run  # noqa: E402

FOREIGN_DIGITS = ["\u00b9", "\u2461", "\U00010a40", "\uff11\uff12", "\u0661\u0662", "\u0967", "\U0001d7d9"]


@pytest.mark.parametrize("expires", [*FOREIGN_DIGITS, "+99999999999", " 9999999999", "1_0", "9" * 5000, "-1", ""])
def test_a_signed_links_expiry_is_ascii_digits_or_malformed(expires):
    signer = UrlSigner("s" * 32, clock=lambda: 1000.0)
    with pytest.raises(SignedUrlError, match="malformed signed link"):
        signer.check_expiry(expires)


def test_anonymous_thumbnail_links_with_foreign_digits_get_a_404_not_a_500(engine, tmp_path):
    async def scenario():
        async with node(engine, tmp_path / "data") as client:
            answers = {}
            for digits in FOREIGN_DIGITS:
                async with client.session.get(client.make_url("/api/v1/faces/astronaut/thumbnail.jpg"),
                                              params={"expires": digits, "sig": "x"}) as response:
                    answers[digits] = response.status, (await response.json())["error"]
            return answers

    answers = run(scenario())
    assert {status for status, _ in answers.values()} == {404}, answers
    assert all("malformed signed link" in reason for _, reason in answers.values()), answers


def test_an_sdp_offer_with_foreign_digits_is_a_400(engine, tmp_path):
    async def scenario():
        pc = client_peer()
        offer = await camera_offer(pc)
        await pc.close()
        arabic = str.maketrans("0123456789", "\u0660\u0661\u0662\u0663\u0664\u0665\u0666\u0667\u0668\u0669")
        foreign = re.sub(r"a=rtpmap:(\d+) ", lambda m: m.group().translate(arabic), offer, count=1)
        assert foreign != offer
        async with node(engine, tmp_path / "data") as client:
            response = await client.post("/api/v1/sessions", json={"face_id": "astronaut", "sdp": foreign,
                                                                   "type": "offer"})
            return response.status, (await response.json())["error"]

    status, reason = run(scenario())
    assert status == 400 and "ASCII digits" in reason


@pytest.mark.parametrize("value", ["\uff18\uff10\uff18\uff10", "\u0668\u0660\u0668\u0660", "'8080'1"])
def test_config_integers_are_ascii_digits(value):
    with pytest.raises(ConfigError, match="server.port"):
        load_config(environ={"SWAPCAST_SERVER__PORT": value})


def test_a_query_limit_in_foreign_digits_is_a_400():
    from signaling.jobs.routes import add_job_routes  # noqa: F401  (the route parses it; here the parser)
    from signaling.numbers import NumberError, parse_natural

    for text in FOREIGN_DIGITS:
        with pytest.raises(NumberError, match="ASCII digits"):
            parse_natural(text, "limit", minimum=1, maximum=500)
    assert parse_natural("50", "limit", minimum=1, maximum=500) == 50
