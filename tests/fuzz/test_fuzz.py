"""Every entry point that takes untrusted input, fuzzed (issue 22): each input ends in success or an
OxillamaError, never another exception. Budgets per target: the `ci` profile (tests/fuzz/conftest.py),
scaled by EXAMPLES below for the slow targets; OXILLAMA_FUZZ_PROFILE=long for more."""
import pytest
from hypothesis import given, settings

from .conftest import PROFILE
from .targets import TARGETS

# minutes in all (a server and model loads among the targets): CI runs it, a plain `pytest` leaves it out
pytestmark = pytest.mark.slow

# relative budgets: a chat template or a schema is cheap, a model load or a generate call is not
EXAMPLES = {"chat_template": 1.0, "gbnf": 1.0, "json_schema": 1.0, "model_file": 0.5, "snapshot": 0.5,
            "generate": 1.0, "tokenizer": 1.0,
            "http": 1.0}


@pytest.fixture(scope="module")
def states():
    made = {}

    def get(name):
        if name not in made:
            made[name] = TARGETS[name][1]()
        return made[name]
    yield get
    for state in made.values():
        if hasattr(state, "close"):
            state.close()


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_fuzz(name, states):
    strategy, _, check = TARGETS[name]
    state = states(name)
    base = settings.get_profile(PROFILE)

    @settings(base, max_examples=max(10, int(base.max_examples * EXAMPLES[name])))
    @given(strategy)
    def run(case):
        check(state, case)
    run()
