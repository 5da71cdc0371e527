"""Stopping criteria and incremental stop strings."""
import numpy as np

from oxillama.sampling import MaxNewTokens, StoppingCriteriaList, StopStrings, StopTokens


def test_token_criteria():
    crit = StoppingCriteriaList([MaxNewTokens(3, prompt_len=2), StopTokens([0])])
    assert not crit([5, 6, 7], None)
    assert crit([5, 6, 7, 0], None)          # EOS
    assert crit([5, 6, 7, 8, 9], None)       # 3 new tokens
    user = StoppingCriteriaList([lambda toks, logits: bool(logits is not None and logits.max() > 10)])
    assert user([1], np.array([11.0])) and not user([1], np.array([1.0]))


def test_stop_string_across_token_boundaries():
    s = StopStrings(["</end>", "STOP"])
    shown = []
    for piece in ["Hello", " wor", "ld</", "en", "d> more"]:
        text, stopped = s.feed(piece)
        shown.append(text)
        if stopped:
            break
    assert "".join(shown) == "Hello world"
    assert stopped and s.matched == "</end>"


def test_held_text_is_released_when_ruled_out():
    s = StopStrings(["STOP"])
    assert s.feed("abc ST") == ("abc ", False)
    assert s.feed("ART") == ("START", False)
    assert s.feed("xx S") == ("xx ", False)
    assert s.flush() == "S"


def test_earliest_stop_wins():
    s = StopStrings(["b", "abc"])
    assert s.feed("xxabc") == ("xx", True)    # "abc" starts before "b"
    assert s.matched == "abc"
    assert s.feed("more") == ("", True)
