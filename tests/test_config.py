from pathlib import Path

import pytest
import yaml

from swapcast.config import Config, ConfigError, load_config

REPO = Path(__file__).resolve().parent.parent


def test_default_yaml_mirrors_embedded_defaults():
    on_disk = yaml.safe_load((REPO / "configs" / "default.yaml").read_text())
    assert on_disk == Config().model_dump(mode="json")


def test_precedence_defaults_file_environment_flags(tmp_path):
    path = tmp_path / "node.yaml"
    path.write_text("swap:\n  blend: 0.3\n  mouth_mask: true\nserver:\n  port: 9000\n")
    env = {"SWAPCAST_SWAP__BLEND": "0.5", "SWAPCAST_ENGINE__MAX_FACES": "2"}
    config = load_config(path, environ=env, overrides={"server": {"port": 9100, "host": None}})
    assert config.swap.blend == 0.5  # environment beats file
    assert config.swap.mouth_mask is True  # file beats defaults
    assert config.engine.max_faces == 2
    assert config.server.port == 9100  # flags beat everything
    assert config.server.host == "127.0.0.1"  # a flag left out (None) changes nothing


def test_config_file_from_environment(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("engine:\n  swapper: mesh\n")
    assert load_config(environ={"SWAPCAST_CONFIG": str(path)}).engine.swapper == "mesh"


@pytest.mark.parametrize(
    ("text", "env", "needle"),
    [
        ("swap:\n  blend: 2\n", {}, "swap.blend"),
        ("swap:\n  blnd: 1\n", {}, "swap.blnd"),
        ("- a list\n", {}, "mapping"),
        ("", {"SWAPCAST_SWAP__FACE_SELECTION": "everyone"}, "swap.face_selection"),
        ("", {"SWAPCAST_SWAP_BLEND": "1"}, "expected SWAPCAST_SWAP__BLEND"),
        ("", {"SWAPCAST_SWAP____BLEND": "1"}, "SWAPCAST_<SECTION>__<KEY>"),
        ("auth:\n  jwt_secret: changeme\n", {}, "auth.jwt_secret"),
        ("", {"SWAPCAST_AUTH__JWT_SECRET": "x" * 31}, "at least 32 bytes"),
        ("", {"SWAPCAST_CLUSTER__REDIS_URL": "http://ops:hunter2@10.0.0.5:6379"}, "cluster.redis_url"),
    ],
)
def test_bad_configuration_is_a_clear_error(tmp_path, text, env, needle):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=needle.replace(".", r"\.").replace("<", "<").replace("[", r"\[")):
        load_config(path, environ=env)


def test_tool_variables_are_not_config():
    """SWAPCAST_CHROMIUM, SWAPCAST_TOKEN, ... belong to tools and tests, not the schema."""
    assert load_config(environ={"SWAPCAST_CHROMIUM": "/usr/bin/chromium", "SWAPCAST_TOKEN": "t"}) == load_config(environ={})


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml", environ={})


def test_sections_convert_to_runtime_types():
    config = load_config(environ={"SWAPCAST_SWAP__MOUTH_MASK": "true", "SWAPCAST_ENGINE__CROP_SIZE": "192"})
    assert config.swap.options().mouth_mask is True
    assert config.engine.settings().crop_size == 192


def test_redis_urls_in_messages_hide_their_password():
    from swapcast.config import redacted_url

    assert redacted_url("redis://ops:hunter2@10.0.0.5:6379/0") == "redis://ops:***@10.0.0.5:6379/0"
    assert redacted_url("rediss+cluster://:hunter2@a:1,b:2") == "rediss+cluster://:***@a:1,b:2"
    assert redacted_url("redis://10.0.0.5:6379/0") == "redis://10.0.0.5:6379/0"
    with pytest.raises(ConfigError) as refused:
        load_config(environ={"SWAPCAST_CLUSTER__REDIS_URL": "http://ops:hunter2@10.0.0.5:6379"})
    assert "hunter2" not in str(refused.value) and "redis+cluster://" in str(refused.value)
    for url in ("redis://h:1/0", "rediss://h:1", "unix:///run/redis.sock", "redis+cluster://a:1,b:2"):
        assert load_config(environ={"SWAPCAST_CLUSTER__REDIS_URL": url}).cluster.redis_url == url


def test_a_child_config_file_keeps_the_secret_a_dump_would_mask(tmp_path):
    config = load_config(environ={"SWAPCAST_PROVENANCE__KEY": "the-watermark-key"})
    assert config.model_dump(mode="json")["provenance"]["key"] == "**********"  # what a child would have read
    path = tmp_path / "child.yaml"
    path.write_text(yaml.safe_dump(config.file_data()))
    child = load_config(path, environ={})
    assert child.provenance.key.get_secret_value() == "the-watermark-key"
    assert child == config
    assert load_config(environ={}).file_data()["provenance"]["key"] is None


@pytest.mark.parametrize(("changes", "needle"), [
    ({"blend": 2}, "invalid options: blend: Input should be less than or equal to 1"),
    ({"occlusion": "sometimes"}, "invalid options: occlusion: Input should be 'auto', 'objects' or 'off'"),
    ({"feather": "soft"}, "invalid options: feather: Input should be a valid number"),
    ({"colour": 1}, "invalid options: colour: Extra inputs are not permitted"),
    ({"face_selection": "reference"}, "face_selection 'reference' needs a reference photo"),
    (["blend", 1], "options must be a JSON object"),
    ({"faces_map": {"keep": "astronaut"}}, "faces_map: Value error, 'keep' is not a person"),
    ({"faces_map": {"person-1": "../etc"}}, "person-1 wears '../etc': use a face id"),
    ({"faces_map": {f"person-{n}": "keep" for n in range(17)}}, "names 17 people; at most 16"),
    ({"faces_map": ["person-1"]}, "faces_map: Input should be a valid dictionary"),
    ({"unmapped": "nobody"}, "unmapped: Input should be 'source' or 'keep'"),
])
def test_a_live_sessions_bad_option_is_refused_naming_it(changes, needle):
    from swapcast.config import SwapConfig

    with pytest.raises(ValueError) as refused:
        SwapConfig(blend=0.7).with_live_changes(changes)
    assert needle in str(refused.value) and "\n" not in str(refused.value)


def test_a_live_sessions_option_changes_apply_over_its_options():
    from swapcast.config import SwapConfig

    changed = SwapConfig(blend=0.7, mouth_mask=True).with_live_changes({"occlusion": "auto", "feather": 0.1})
    assert (changed.blend, changed.mouth_mask, changed.occlusion, changed.feather) == (0.7, True, "auto", 0.1)
    mapped = changed.with_live_changes({"faces_map": {"person-2": "u-1a2b3c", "grace_hopper": "keep"}, "unmapped": "keep"})
    assert mapped.faces_map == {"person-2": "u-1a2b3c", "grace_hopper": "keep"} and mapped.unmapped == "keep"
    assert mapped.with_live_changes({"faces_map": {}}).faces_map == {}  # a map is replaced whole
    assert "faces_map" not in vars(mapped.options())  # the swappers' options carry no map
