"""Every entry point that takes untrusted input, fuzzed (issue 22): each input ends in success or the typed
OxillamaError its target expects, never another exception. Budgets per target: the `ci` profile
(tests/fuzz/conftest.py), scaled by EXAMPLES below for the slow targets; OXILLAMA_FUZZ_PROFILE=long for more.

Each target's budget is split: the fixed (derandomized) corpus, then RANDOM_SHARE of it from a fresh random
seed, printed on stderr and in a failure's message; OXILLAMA_FUZZ_SEED=N replays one."""
import os
import random
import sys

import pytest
from hypothesis import given, seed, settings

from .conftest import PROFILE
from .targets import TARGETS

# minutes in all (a server and model loads among the targets): CI runs it, a plain `pytest` leaves it out
pytestmark = pytest.mark.slow

# relative budgets: a chat template or a schema is cheap, a model load or a generate call is not
EXAMPLES = {"chat_template": 1.0, "gbnf": 1.0, "json_schema": 1.0, "model_file": 0.5, "snapshot": 0.5,
            "generate": 1.0, "tokenizer": 1.0,
            "http": 1.0}
RANDOM_SHARE = 0.3   # of each target's budget; the fixed corpus takes the rest, so the suite's time is unchanged
SEED = int(os.environ.get("OXILLAMA_FUZZ_SEED") or random.SystemRandom().randrange(2**32))


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

    n = max(10, int(base.max_examples * EXAMPLES[name]))

    def check_one(case):
        check(state, case)

    n_random = max(5, int(n * RANDOM_SHARE))
    settings(base, max_examples=n - n_random)(given(strategy)(check_one))()      # the fixed corpus
    print(f"fuzz {name}: random seed {SEED} (replay: OXILLAMA_FUZZ_SEED={SEED})", file=sys.stderr)
    fresh = seed(SEED)(settings(base, max_examples=n_random, derandomize=False)(
        given(strategy)(check_one)))
    try:
        fresh()
    except Exception as e:
        raise AssertionError(f"fuzz target {name} failed from random seed {SEED}: replay with "
                             f"OXILLAMA_FUZZ_SEED={SEED} pytest tests/fuzz -k {name}") from e
