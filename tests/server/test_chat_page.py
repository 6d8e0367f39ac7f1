"""The chat page at `GET /` of `mlxrt server`, driven in headless Chromium by Selenium (Debian's
chromium and chromium-driver; PyPI's selenium): the page loads with the served model's name, an
answer streams in and equals what /v1/chat/completions returns for the same (seeded) request body,
reasoning is shown folded, markdown and code blocks render, stop aborts mid-answer (and the server
stops generating), and after a reload the conversations are still there.

One server, on a tiny scripted qwen3 (tools/make_server_fixture.py): after a prompt with thinking
off it writes a think block and a markdown answer; otherwise it writes random text. Set
MLXRT_CHAT_SCREENSHOT=PATH to save the page, mid-conversation, as a PNG (docs/chat-page.png)."""
import json
import os
import re
import shutil
import sys
import time

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

from conftest import FIXTURES, MLXRT_BIN, SOURCE, free_port, start, stop

sys.path.insert(0, str(SOURCE / "tools"))
import make_server_fixture  # noqa: E402

REASONING = "A greeting in Python takes one print call."
ANSWER = 'Here is **hello world** in Python:\n```python\nprint("Hello, world!")\n```\nRun it with `python hello.py`.'
CHAT = "/v1/chat/completions"
MODEL_ID, COMMIT = "demo/qwen3-tiny-chat", "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    model_dir = make_server_fixture.ensure(FIXTURES, name="server_qwen3_chat_page",
                                           script=f"<think>{REASONING}</think>{ANSWER}")
    # Served by id from a Hugging Face cache of its own (what the page shows as the model's name).
    cache = tmp_path_factory.mktemp("hf-cache")
    snapshot = cache / "models--demo--qwen3-tiny-chat" / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    for f in model_dir.iterdir():
        (snapshot / f.name).symlink_to(f)
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text(COMMIT)
    port = free_port()
    running = start([MLXRT_BIN, "server", "--model", MODEL_ID, "--host", "127.0.0.1", "--port", str(port)], port,
                    tmp_path_factory, "mlxrt", env={"HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1"})
    running.url = f"http://127.0.0.1:{port}/"
    yield running
    stop(running)


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    chromium, driver_bin = shutil.which("chromium"), shutil.which("chromedriver")
    # Not a skip: without a browser the page is untested.
    assert chromium and driver_bin, ("the chat page test needs Chromium and its driver: install Debian's "
                                     "chromium and chromium-driver (tools/setup/install-debian-packages.sh)")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=960,640", "--force-prefers-reduced-motion",
                f"--user-data-dir={tmp_path_factory.mktemp('chromium')}"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(driver_bin), options=options)
    yield driver
    driver.quit()


def wait(driver, condition, timeout=60):
    return WebDriverWait(driver, timeout, poll_frequency=0.02).until(lambda d: condition(d))


def stored(driver):
    return json.loads(driver.execute_script("return localStorage.getItem('mlxrt.chat.v1')"))


def set_setting(driver, element_id, value):
    field = driver.find_element(By.ID, element_id)
    field.clear()
    if value != "":
        field.send_keys(str(value))
    field.send_keys(Keys.TAB)  # "change" saves it


def send(driver, text):
    box = driver.find_element(By.ID, "input")
    box.send_keys(text)
    box.send_keys(Keys.ENTER)


def last_answer(driver):
    return driver.find_elements(By.CSS_SELECTOR, "#messages .msg.assistant")[-1]


def answer_done(driver):
    return wait(driver, lambda d: not d.find_elements(By.CSS_SELECTOR, ".msg.streaming") and last_answer(d))


def api_answer(server, page_body):
    """The same request the page sent, not streamed."""
    body = {k: v for k, v in page_body.items() if k not in ("stream", "stream_options")}
    status, reply = server.post_json(CHAT, body)
    assert status == 200, reply
    return reply


def metric(server, name):
    _, _, raw = server.request("GET", "/metrics")
    return float(re.search(rf"^{name} (\S+)$", raw.decode(), re.M).group(1))


INSTRUMENT = """
window.__bodies = [];
const realFetch = window.fetch;
window.fetch = (url, init) => {
  if (url === '/v1/chat/completions') window.__bodies.push(JSON.parse(init.body));
  return realFetch(url, init);
};
window.__seen = [];
new MutationObserver(() => {
  const answers = document.querySelectorAll('#messages .msg.assistant .content');
  const text = answers.length ? answers[answers.length - 1].textContent : '';
  if (text && window.__seen[window.__seen.length - 1] !== text) window.__seen.push(text);
}).observe(document.getElementById('messages'), {subtree: true, childList: true, characterData: true});
"""


def test_page_is_served_from_the_binary(server):
    status, headers, raw = server.request("GET", "/")
    assert status == 200 and headers["Content-Type"] == "text/html; charset=utf-8"
    assert "default-src 'self'" in headers["Content-Security-Policy"]
    assert raw == (SOURCE / "src/mlxrt/server/web/index.html").read_bytes()
    html = raw.decode()
    assets = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert sorted(assets) == ["/ui/app.js", "/ui/markdown.js", "/ui/style.css", "data:,"]  # data:, no favicon
    for path in (a for a in assets if a.startswith("/")):
        status, headers, body = server.request("GET", path)
        assert status == 200 and body, path
        assert headers["Content-Type"].startswith("text/css" if path.endswith(".css") else "text/javascript")
        assert body == (SOURCE / "src/mlxrt/server/web" / path.removeprefix("/ui/")).read_bytes(), path
        # Nothing from elsewhere: no absolute URLs in what the page loads.
        assert not re.search(rb"""(["'(]|url\()\s*(https?:)?//""", body), path
    # Only addressed to this server (DNS rebinding protection), as the API.
    status, _, _ = server.request("GET", "/", headers={"Host": "rebind.example"})
    assert status == 403
    # Other paths answer as before: the JSON 404 of mlx_lm.server.
    for path in ("/ui/missing.js", "/index.html", "/v2/whatever"):
        status, _, body = server.request("GET", path)
        assert (status, json.loads(body)["error"]["message"]) == (404, "Not Found"), path


def test_chat_in_the_browser(server, browser):
    d = browser
    d.get(server.url)
    d.execute_script(INSTRUMENT)
    # The served model, as /v1/models names it, is the one selected.
    _, _, raw = server.request("GET", "/v1/models")
    assert [m["id"] for m in json.loads(raw)["data"]] == [MODEL_ID]
    wait(d, lambda d: d.find_element(By.ID, "model").get_attribute("value") == MODEL_ID)

    # 1. A seeded, sampled answer streams in and equals the API's answer to the same body.
    d.find_element(By.ID, "toggle-settings").click()
    for field, value in (("temperature", "0.8"), ("top-p", "0.9"), ("max-tokens", "24"), ("seed", "11")):
        set_setting(d, field, value)
    send(d, "Tell me a story.")
    answer_done(d)
    body = d.execute_script("return window.__bodies")[-1]
    assert {k: body[k] for k in ("temperature", "top_p", "max_tokens", "seed", "model", "stream")} == {
        "temperature": 0.8, "top_p": 0.9, "max_tokens": 24, "seed": 11, "model": MODEL_ID, "stream": True}
    assert body["messages"] == [{"role": "user", "content": "Tell me a story."}]
    reply = api_answer(server, body)
    story = stored(d)["conversations"][0]
    assert story["messages"][1]["content"] == reply["choices"][0]["message"]["content"] != ""
    seen = d.execute_script("return window.__seen")
    assert len(seen) >= 5, f"the answer did not stream: {len(seen)} states seen"
    stats = last_answer(d).find_element(By.CLASS_NAME, "stats").text
    assert re.fullmatch(r"TTFT \d+ ms · [\d.]+ tokens/s · 24 tokens · max tokens reached", stats), stats
    assert reply["usage"]["completion_tokens"] == 24

    # 2. A new conversation: reasoning folded, markdown and the code block rendered.
    d.find_element(By.ID, "new-chat").click()
    set_setting(d, "template-kwargs", '{"enable_thinking": false}')
    set_setting(d, "temperature", "0")
    set_setting(d, "max-tokens", "60")
    set_setting(d, "top-p", "")  # an empty field: the server's default
    send(d, "Hello world in Python?")
    answer = answer_done(d)
    body = d.execute_script("return window.__bodies")[-1]
    assert "top_p" not in body and body["chat_template_kwargs"] == {"enable_thinking": False}
    reply = api_answer(server, body)["choices"][0]["message"]
    assert (reply["reasoning"], reply["content"]) == (REASONING, ANSWER)
    saved = stored(d)["conversations"][0]["messages"][1]
    assert (saved["reasoning"], saved["content"]) == (REASONING, ANSWER)
    stats = answer.find_element(By.CLASS_NAME, "stats").text
    assert re.fullmatch(r"TTFT \d+ ms · [\d.]+ tokens/s · \d+ tokens", stats), stats  # ended by the model
    details = answer.find_element(By.CSS_SELECTOR, "details.reasoning")
    assert details.is_displayed() and details.get_attribute("open") is None
    assert details.find_element(By.TAG_NAME, "summary").text == "Reasoning"
    content = answer.find_element(By.CLASS_NAME, "content")
    assert content.find_element(By.TAG_NAME, "strong").text == "hello world"
    assert content.find_element(By.CSS_SELECTOR, ".code-head span").text == "python"
    assert content.find_element(By.CSS_SELECTOR, ".code pre code").text == 'print("Hello, world!")'
    assert content.find_element(By.CSS_SELECTOR, "p code").text == "python hello.py"
    details.find_element(By.TAG_NAME, "summary").click()
    assert details.get_attribute("open") is not None and REASONING in details.text
    if os.environ.get("MLXRT_CHAT_SCREENSHOT"):
        d.find_element(By.ID, "toggle-settings").click()
        d.save_screenshot(os.environ["MLXRT_CHAT_SCREENSHOT"])
        d.find_element(By.ID, "toggle-settings").click()

    # 3. Stop mid-answer: the page keeps what arrived, and the server stops generating.
    d.find_element(By.ID, "new-chat").click()
    set_setting(d, "template-kwargs", "")
    set_setting(d, "temperature", "0.8")
    set_setting(d, "max-tokens", "2000")
    tokens_before = metric(server, "mlxrt_generation_tokens_total")
    send(d, "A long one, please.")
    wait(d, lambda d: d.find_elements(By.CSS_SELECTOR, ".msg.streaming .content")
         and d.find_element(By.CSS_SELECTOR, ".msg.streaming .content").text)
    d.find_element(By.ID, "stop").click()
    answer = answer_done(d)
    assert answer.find_element(By.CLASS_NAME, "stats").text.endswith("stopped")
    assert d.find_element(By.ID, "send").is_displayed() and not d.find_element(By.ID, "stop").is_displayed()
    wait(d, lambda _: metric(server, "mlxrt_batch_size") == 0, timeout=30)
    generated = metric(server, "mlxrt_generation_tokens_total") - tokens_before
    assert 0 < generated < 2000, generated
    partial = stored(d)["conversations"][0]["messages"][1]
    assert partial["stopped"] and partial["content"]
    # The tokens the server made before it stopped (no fewer than the page received) start the
    # same request's answer.
    body = dict(d.execute_script("return window.__bodies")[-1], max_tokens=int(generated))
    full = api_answer(server, body)["choices"][0]["message"]["content"]
    assert full.startswith(partial["content"]), (full, partial["content"])

    # 4. After a reload the three conversations are listed and open as they were; one is deleted.
    before = stored(d)
    d.refresh()
    wait(d, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#conversations li")) == 3)
    titles = [e.text for e in d.find_elements(By.CSS_SELECTOR, "#conversations li .open")]
    assert titles == ["A long one, please.", "Hello world in Python?", "Tell me a story."]
    assert last_answer(d).find_element(By.CLASS_NAME, "stats").text.endswith("stopped")
    d.find_elements(By.CSS_SELECTOR, "#conversations li .open")[2].click()
    messages = d.find_elements(By.CSS_SELECTOR, "#messages .msg")
    assert [m.get_attribute("class") for m in messages] == ["msg user", "msg assistant"]
    assert messages[0].text == "Tell me a story."
    assert stored(d)["conversations"] == before["conversations"]
    d.find_elements(By.CSS_SELECTOR, "#conversations li .delete")[1].click()
    assert [c["title"] for c in stored(d)["conversations"]] == ["A long one, please.", "Tell me a story."]
    assert len(d.find_elements(By.CSS_SELECTOR, "#conversations li")) == 2

    # No script errors and no blocked loads (the Content-Security-Policy reports them here).
    severe = [e for e in d.get_log("browser") if e["level"] == "SEVERE"]
    assert not severe, severe


def test_markdown_escapes_model_output(server, browser):
    browser.get(server.url)
    html = browser.execute_script("return renderMarkdown(arguments[0])",
                                  '<img src=x onerror=alert(1)> [a](javascript:alert(1)) *x*\n```\n<b>')
    assert html == ("<p>&lt;img src=x onerror=alert(1)&gt; [a](javascript:alert(1)) <em>x</em></p>"
                    '<div class="code"><div class="code-head"><span></span><button type="button" class="copy">Copy'
                    "</button></div><pre><code>&lt;b&gt;</code></pre></div>")
