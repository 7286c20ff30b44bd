"""One client, one key, one trusted-proxy match, whichever way its address is written."""

from __future__ import annotations

import pytest

from signaling.client_address import client_key, in_networks, parse_networks


@pytest.mark.parametrize(("address", "key"), [
    ("10.0.0.1", "10.0.0.1"),
    ("::ffff:10.0.0.1", "10.0.0.1"),
    ("::FFFF:0a00:0001", "10.0.0.1"),
    ("2001:db8:1:2::1", "2001:db8:1:2::/64"),
    ("2001:db8:1:2:ffff:ffff:ffff:ffff", "2001:db8:1:2::/64"),
    ("fe80::1%eth0", "fe80::/64"),
    ("::1", "::/64"),
    ("unknown", "unknown"),
])
def test_client_key(address, key):
    assert client_key(address) == key


def test_ipv4_cidrs_cover_mapped_addresses_and_mapped_cidrs_cover_both_forms():
    proxies = parse_networks(["10.0.0.0/8", "::ffff:192.168.0.0/112", "2001:db8::/32"])
    assert in_networks("::ffff:10.9.8.7", proxies) and in_networks("10.9.8.7", proxies)
    assert in_networks("::ffff:192.168.1.1", proxies) and in_networks("192.168.1.1", proxies)
    assert not in_networks("192.169.0.1", proxies)
    assert in_networks("2001:db8:ffff::1", proxies)
    assert not in_networks("::ffff:11.0.0.1", proxies) and not in_networks("11.0.0.1", proxies)
    assert not in_networks("not an address", proxies)
