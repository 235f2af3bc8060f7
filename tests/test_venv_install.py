"""bootstrap/venv_install.py: pip's package sources become uv's flags, with pip's precedence between them."""

from __future__ import annotations

from bootstrap.venv_install import pip_settings, uv_source_flags

CONFIG = """\
:env:.find-links='/opt/wheels /srv/more wheels'
:env:.default-timeout='180'
global.cert='/etc/ssl/certs/ca-certificates.crt'
global.constraint='/etc/xdg/pip/constraints.txt'
global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'
global.find-links='/ignored/by/env'
global.index-url='https://global.example/simple'
install.index-url='https://install.example/simple'
download.index-url='https://download.example/simple'
not a setting
"""


def test_environment_beats_install_beats_global_and_other_sections_are_ignored():
    settings = pip_settings(CONFIG)
    assert settings["find-links"] == "/opt/wheels /srv/more wheels"
    assert settings["index-url"] == "https://install.example/simple"
    assert settings["cert"] == "/etc/ssl/certs/ca-certificates.crt"
    assert "download" not in " ".join(settings.values())


def test_each_source_becomes_its_flag_in_order_then_the_best_match_strategy():
    flags = uv_source_flags(pip_settings(CONFIG))
    assert flags == [
        "--index-url",
        "https://install.example/simple",
        "--extra-index-url",
        "file:///opt/pypi/simple",
        "--extra-index-url",
        "file:///opt/pypi-more/simple",
        "--find-links",
        "/opt/wheels",
        "--find-links",
        "/srv/more",
        "--find-links",
        "wheels",
        "--constraint",
        "/etc/xdg/pip/constraints.txt",
        "--index-strategy",
        "unsafe-best-match",
    ]


def test_no_configuration_leaves_uv_on_its_defaults():
    assert uv_source_flags(pip_settings("")) == ["--index-strategy", "unsafe-best-match"]
