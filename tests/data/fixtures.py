"""pytest fixture: the conformance corpus, built once per test session.

Use it with ``from tests.data.fixtures import corpus  # noqa: F401`` in a test
module (or ``pytest_plugins = ["tests.data.fixtures"]`` in the root conftest).
"""
import pytest


@pytest.fixture(scope="session")
def corpus(tmp_path_factory):
    """The manifest (dict) of a corpus freshly built in a session temp dir."""
    from .corpus import build

    return build(str(tmp_path_factory.mktemp("corpus")))
