"""research.tools.probe: the update probes' shared command line and their JSON record."""

import json
from pathlib import Path

import pytest

from research.tools.probe import check_rates, probe_parser, write_results


def test_the_parser_takes_a_config_and_rates_defaulting_to_one():
    parser = probe_parser("research.tools.x", "about x", per_rate="run")
    assert parser.prog == "python -m research.tools.x"
    args = parser.parse_args(["runs/a/config.json", "--lr", "1e-4", "3e-4"])
    assert (args.config, args.lr) == (Path("runs/a/config.json"), [1e-4, 3e-4])
    assert parser.parse_args(["c.json"]).lr == [3e-4]
    assert "one run per rate" in parser.format_help()


@pytest.mark.parametrize("rates", [[0.0], [1e-4, -1e-4], [float("inf")], [float("nan")]])
def test_a_rate_that_is_not_positive_and_finite_stops_naming_the_rates(rates, capsys):
    parser = probe_parser("research.tools.x", None, per_rate="update")
    with pytest.raises(SystemExit):
        check_rates(parser, rates)
    assert f"--lr rates must be positive and finite, got {rates}" in capsys.readouterr().err


def test_positive_finite_rates_pass():
    check_rates(probe_parser("research.tools.x", None, per_rate="update"), [1e-12, 3e-4, 1.0])


def test_the_record_holds_the_command_as_typed_and_the_results(tmp_path):
    out = tmp_path / "new" / "folder" / "x.json"
    write_results(out, "research.tools.x", ["a b/config.json", "--lr", "1e-4"], [{"lr": 1e-4}])
    written = json.loads(out.read_text())
    assert written == {"command": "python -m research.tools.x 'a b/config.json' --lr 1e-4", "results": [{"lr": 1e-4}]}
