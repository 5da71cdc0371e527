"""The chat page at / in a real headless Chromium (the DevTools protocol) against the real server on
loopback: it shows the model's name, a typed message gets a streamed answer, the stop button ends a
long one, and the answer's markdown is rendered with its HTML escaped. Outside CI, a machine without
a browser skips; in CI (.ci/run installs Debian's chromium) a missing browser fails."""
from __future__ import annotations

import json
import os

import pytest

from .browser import Browser, find_browser

pytest.importorskip("websockets", reason="the websockets package drives the browser")

pytestmark = pytest.mark.slow      # a browser and a real model's server: CI runs it (CI=true or --run-slow)


@pytest.fixture(scope="module")
def browser():
    executable = find_browser()
    if executable is None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("no chromium in CI: .ci/run installs Debian's chromium package")
        pytest.skip("no chromium/chrome on this machine (apt-get install chromium)")
    b = Browser(executable)
    yield b
    b.close()


@pytest.fixture(scope="module")
def page_server(smollm2_path, server_factory):
    server = server_factory(smollm2_path, "--parallel", "2", "--n-ctx", "1024", "--alias", "smol-chat")
    yield server
    server.stop()


def test_the_page_needs_no_key_and_nothing_from_elsewhere(page_server):
    import httpx
    r = httpx.get(page_server.base_url + "/", timeout=30)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert "<script src" not in r.text and "<link" not in r.text and "http://" not in r.text.replace(
        "https?:\\/\\/", "")       # self-contained: no script, style or font from another server


def test_type_a_message_and_see_the_streamed_answer(browser, page_server):
    browser.goto(page_server.base_url + "/")
    assert browser.wait_for("document.getElementById('model').textContent === 'smol-chat' && 'ok'") == "ok"
    browser.type_text("#input", "What is the capital of France?")
    browser.press_enter()
    # the answer streams in: text appears while the page still says it is answering
    browser.wait_for("document.body.dataset.state === 'streaming' && "
                     "document.querySelector('.msg.assistant').textContent.length > 0")
    browser.wait_for("document.querySelector('.msg.assistant').dataset.done === '1'", timeout=120)
    user = browser.evaluate("document.querySelector('.msg.user').textContent")
    answer = browser.evaluate("document.querySelector('.msg.assistant').textContent")
    assert user == "What is the capital of France?"
    assert answer.strip(), answer         # sampled at the server's default temperature: some text
    assert browser.evaluate("document.querySelector('.msg.error')") is None
    assert browser.evaluate("document.getElementById('send').disabled") is False


def test_the_stop_button_ends_a_long_answer(browser, page_server):
    browser.goto(page_server.base_url + "/")
    browser.wait_for("document.getElementById('model').textContent === 'smol-chat'")
    browser.type_text("#input", "Write a very long story about a dragon, in many chapters.")
    browser.click("#send")
    browser.wait_for("document.querySelector('.msg.assistant').textContent.length > 20")
    browser.click("#stop")
    browser.wait_for("document.querySelector('.msg.assistant').dataset.done === '1'", timeout=30)
    assert browser.evaluate("document.getElementById('status').textContent") == "stopped"
    text = browser.evaluate("document.querySelector('.msg.assistant').textContent")
    assert len(text) > 20
    # the server let go of the request: every slot is idle again
    import httpx
    slots = httpx.get(page_server.base_url + "/slots", timeout=30).json()
    for _ in range(50):
        if not any(s["is_processing"] for s in slots):
            break
        import time
        time.sleep(0.2)
        slots = httpx.get(page_server.base_url + "/slots", timeout=30).json()
    assert not any(s["is_processing"] for s in slots), slots


@pytest.mark.parametrize("markdown, html", [
    ("**bold** and *it*", "<p><strong>bold</strong> and <em>it</em></p>"),
    ("# Title", "<h1>Title</h1>"),
    ("- a\n- b", "<ul><li>a</li><li>b</li></ul>"),
    ("1. a\n2. b", "<ol><li>a</li><li>b</li></ol>"),
    ("use `x < y`", "<p>use <code>x &lt; y</code></p>"),
    ("```python\nif a < b:\n    pass\n```", "<pre><code>if a &lt; b:\n    pass\n</code></pre>"),
    ("<script>alert(1)</script>", "<p>&lt;script&gt;alert(1)&lt;/script&gt;</p>"),
    ("[x](javascript:alert(1))", "<p>[x](javascript:alert(1))</p>"),
    ("[site](https://example.org)", '<p><a href="https://example.org" target="_blank" rel="noopener">site</a></p>'),
])
def test_markdown_is_rendered_and_html_escaped(browser, page_server, markdown, html):
    if browser.evaluate("typeof window.oxlRenderMarkdown") != "function":
        browser.goto(page_server.base_url + "/")
    assert browser.evaluate(f"window.oxlRenderMarkdown({json.dumps(markdown)})") == html
