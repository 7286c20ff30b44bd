from __future__ import annotations

import pytest

from provenance_kit import make_test_ca


@pytest.fixture(scope="session")
def test_ca(tmp_path_factory):
    return make_test_ca(tmp_path_factory.mktemp("c2pa-ca"))
