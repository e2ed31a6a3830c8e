"""A transfer method is one function plus one row: the toy ``relay`` (tests/toymethod.py)
joins the table, the staging option and the command line's choices by registering."""
import pytest

from core.errors import UnknownName
from stager.staging.options import resolve_options
from stager.staging.transfer import METHODS


def test_a_registered_method_is_a_choice_everywhere():
    import tests.toymethod  # registers the method
    from stager.cli import _build_parser

    assert "relay" in METHODS.names() and METHODS.load("relay") is tests.toymethod.relay
    assert resolve_options(env={}, method="relay").method == "relay"
    assert resolve_options(env={"STAGER_METHOD": "relay"}).method == "relay"
    args = _build_parser("stage").parse_args(["stage", "spec.hook", "--method", "relay"])
    assert args.method == "relay"
    with pytest.raises(UnknownName, match="unknown transfer method 'relays'"):
        METHODS.load("relays")
    with pytest.raises(ValueError):
        resolve_options(env={}, method="relays")
