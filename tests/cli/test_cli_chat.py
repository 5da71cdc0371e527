"""`oxillama chat`: driven through a pseudo-terminal (pexpect) as a user types, and through stdin."""
import json
import os
import subprocess
import sys
import time

import pytest

import oxillama

# the package the tests import (the source tree in development, site-packages in CI)
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(oxillama.__file__)))
ANSWER_TIMEOUT = 120     # seconds: a slow, shared CI machine


def _env(tmp_path) -> dict:
    # the model is given by path, so the cache (where readline's history file goes) can be a fresh one
    return dict(os.environ, PYTHONPATH=PACKAGE_ROOT, OXILLAMA_CACHE=str(tmp_path / "cache"), TERM="dumb",
                PYTHONUNBUFFERED="1")


@pytest.fixture
def chat(smollm2_path, tmp_path):
    pexpect = pytest.importorskip("pexpect")

    def spawn(*args):
        child = pexpect.spawn(sys.executable, ["-m", "oxillama", "chat", "-m", smollm2_path, "--seed", "1", *args],
                              cwd=str(tmp_path), env=_env(tmp_path), encoding="utf-8", timeout=ANSWER_TIMEOUT)
        child.expect_exact(">>> ")
        return child
    children = []
    yield lambda *a: children.append(spawn(*a)) or children[-1]
    for child in children:
        child.close(force=True)


@pytest.mark.slow
def test_chat_turns_reset_save_load_and_ctrl_d(chat, tmp_path):
    child = chat("--temp", "0", "-n", "24", "--system", "You are a helpful assistant.")
    child.sendline("What is the capital of France?")
    child.expect_exact(">>> ")
    first = child.before
    assert "Paris" in first
    child.sendline("And what language do people speak there?")
    child.expect_exact(">>> ")
    child.sendline("/save conv.json")
    child.expect_exact("saved 5 messages")
    child.expect_exact(">>> ")
    saved = json.loads((tmp_path / "conv.json").read_text())["messages"]
    assert [m["role"] for m in saved] == ["system", "user", "assistant", "user", "assistant"]
    assert "Paris" in saved[2]["content"] and saved[2]["content"] in first
    child.sendline("/reset")
    child.expect_exact("conversation reset")
    child.expect_exact(">>> ")
    child.sendline("/save after-reset.json")
    child.expect_exact(">>> ")
    assert json.loads((tmp_path / "after-reset.json").read_text())["messages"] == saved[:1]
    child.sendline("/load conv.json")
    child.expect_exact("loaded 5 messages")
    child.expect_exact(">>> ")
    child.sendline("/save reloaded.json")
    child.expect_exact(">>> ")
    assert json.loads((tmp_path / "reloaded.json").read_text())["messages"] == saved
    child.sendline("/load no-such-file.json")
    child.expect_exact("cannot read conversation")
    child.expect_exact(">>> ")
    child.sendeof()                                            # Ctrl-D
    child.expect(pytest.importorskip("pexpect").EOF)
    child.close()
    assert child.exitstatus == 0
    history = (tmp_path / "cache" / "chat_history").read_text()   # readline's, for the next session
    assert "What is the capital of France?" in history and "/reset" in history


@pytest.mark.slow
def test_ctrl_c_stops_the_answer_and_keeps_the_session(chat, tmp_path):
    child = chat("--temp", "0.8", "-n", "-1", "-c", "2048")
    child.sendline("Write a very long story about a dragon who learns to paint.")
    child.expect_exact("paint.\r\n")                           # the terminal's echo of the line
    child.expect(r"\w+ \w+ \w+")                               # the answer has started streaming
    time.sleep(0.5)
    t0 = time.monotonic()
    child.sendintr()                                           # Ctrl-C
    child.expect_exact("(stopped)")
    child.expect_exact(">>> ")
    assert time.monotonic() - t0 < 30                          # not the rest of a 2,000-token answer
    child.sendline("/save s.json")
    child.expect_exact(">>> ")
    saved = json.loads((tmp_path / "s.json").read_text())["messages"]
    assert [m["role"] for m in saved] == ["user", "assistant"] and saved[1]["content"]
    child.sendintr()                                           # at the prompt: a hint, not an exit
    child.expect_exact("Ctrl-D or /bye")
    child.sendline("/bye")
    child.expect(pytest.importorskip("pexpect").EOF)
    child.close()
    assert child.exitstatus == 0


@pytest.mark.slow
def test_chat_reads_stdin_when_it_is_not_a_terminal(smollm2_path, tmp_path):
    res = subprocess.run([sys.executable, "-m", "oxillama", "chat", "-m", smollm2_path, "--temp", "0", "-n", "20",
                          "--system", "You are a helpful assistant."],
                         input="What is the capital of France?\n/help\n/nonsense\n", capture_output=True, text=True,
                         cwd=str(tmp_path), env=_env(tmp_path), timeout=ANSWER_TIMEOUT)
    assert res.returncode == 0, res.stderr
    assert "Paris" in res.stdout and ">>>" not in res.stdout     # answers only, no prompts
    assert "/save FILE" in res.stderr and "unknown command /nonsense" in res.stderr
