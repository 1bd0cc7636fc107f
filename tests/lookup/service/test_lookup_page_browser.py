"""The page of ``lookup serve`` (``GET /``, lookup/service/page.py) in a real headless Chromium (Debian's
``chromium`` and ``chromium-driver``, driven by selenium with the driver's path given, so nothing
is downloaded): the numbers shown for a table, a refined and a live answer are those of the
``/v1/eps`` JSON for the same query, rounded to 4 significant digits on their safe side (a
certified eps or delta never shown below the JSON's, a lower bound or the largest eps0 never
above), the exact JSON one click away; each kind of answer is explained for what it is; an answer
is never shown as current beside a question it does not answer (the form changed, a newer
question asked, a late response to an older one); answers and curve points ``"refined": false``
are asked again until refined; a curve's SVG points are ``/v1/eps`` answers, placed on log axes,
and so are the eps-against-rounds curve's (``rounds=T``); curves name their mechanism and delta and
are cleared when the question they depend on changes; nothing is clipped at 390 pixels; a bad
input shows the API's message beside the field it names; a refused live question shows the
Retry-After; the permalink reproduces the state, rounds included.  Screenshots (1280 and 390
pixels wide) go to ``$SHUFFLE_EPS_PAGE_SCREENSHOTS`` or a temporary folder."""

from __future__ import annotations

import json
import math
import os
import shutil
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from lookup.service.page import registry
from lookup.store.manifest import read_manifest
from lookup.trust import origin as trust

try:
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait
except ImportError:  # the browser fixture skips every test that would use them
    By = Select = WebDriverWait = StaleElementReferenceException = None

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
KRR = {"mechanism": "krr", "k": "3"}
# the small table (conftest.py): krr k=3, eps0 0.5..4, n 20..80; sources checked against the JSON
# (a refined answer: the engine's estimate certified, or read from the eps0 slice the server computed)
QUESTIONS = [({**KRR, "eps0": "3", "n": "30", "delta": "1e-6", "max_slack": "none"}, {"table"}),
             ({**KRR, "eps0": "0.7", "n": "50", "delta": "1e-6"}, {"certified estimate", "slice"}),
             ({**KRR, "eps0": "6", "n": "50", "delta": "1e-6"}, {"live"})]
WAIT = 60


def api(base: str, path: str, query: dict[str, str]) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"{base}{path}?{urllib.parse.urlencode(query)}", timeout=WAIT) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def settled(base: str, path: str, query: dict[str, str]) -> dict[str, Any]:
    """The server's answer once it stops changing: a table answer not refined within the server's
    budget comes with ``"refined": false`` and its refinement is kept for the next question; its
    first refinement is quick (a certified estimate with its slack unknown), replaced by the full
    one from the next asking on.  So the question is asked until two answers in a row are equal,
    refined and not the quick one (at most ``WAIT`` s)."""
    deadline, last = time.monotonic() + WAIT, None
    while time.monotonic() < deadline:
        status, body = api(base, path, query)
        assert status == 200, body
        quick = body.get("source") == "certified estimate" and body.get("slack") is None
        if body == last and body.get("refined") is not False and not quick:
            return body
        last = body
        time.sleep(0.1)
    raise AssertionError(f"{path} {query} did not settle: {last}")


@pytest.fixture(scope="module", autouse=True)
def cache_home(table_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A cache home of this module's own (the servers inherit it), where the session table is
    recorded as built here (lookup.trust.origin; provenance itself is tested in test_lookup_trust*.py)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))
        patch.delenv(trust.ENV_CACHE, raising=False)
        trust.record_built(table_path, trust.listing_digest(read_manifest(table_path)))  # as tablegen build does
        yield


@pytest.fixture(scope="module")
def base(start_server: Any) -> str:
    return start_server("--live-workers", "1").base


@pytest.fixture(scope="module")
def browser() -> Any:
    """Headless Chromium; the test skipped where Debian's chromium, its driver or selenium is missing."""
    if not (shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER)):
        pytest.skip("Debian's chromium and chromium-driver are not installed (apt-get install chromium "
                    "chromium-driver)")
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (the test extra)")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--hide-scrollbars",
                     "--window-size=1280,1000"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)  # no Selenium Manager download
    driver.set_page_load_timeout(WAIT)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = os.environ.get("SHUFFLE_EPS_PAGE_SCREENSHOTS")
    out = Path(folder) if folder else tmp_path_factory.mktemp("screenshots")
    out.mkdir(parents=True, exist_ok=True)
    return out


def wait(driver: Any, condition: Any, poll: float = 0.5) -> Any:
    """``condition`` true within ``WAIT`` s (looked at every ``poll`` s); an element replaced meanwhile
    (the plot redrawn) is looked up again."""
    return WebDriverWait(driver, WAIT, poll_frequency=poll,
                         ignored_exceptions=(StaleElementReferenceException,)).until(condition)


def fill(driver: Any, form: str, values: dict[str, str]) -> None:
    """Type ``values`` into the fields of ``#form`` (the mechanism first: it makes its parameters' fields)."""
    driver.execute_script(f"document.querySelector('#{form} details')?.setAttribute('open', '')")
    for name, value in sorted(values.items(), key=lambda item: (item[0] != "mechanism", item[0] != "endpoint")):
        field = wait(driver, lambda d, name=name: d.find_element(By.CSS_SELECTOR, f"#{form} [name={name}]"))
        if field.tag_name == "select":
            Select(field).select_by_value(value)
        else:
            field.clear()
            field.send_keys(value)


def ask(driver: Any, values: dict[str, str]) -> dict[str, str]:
    """Fill the question form, press Ask, and read the answer shown: {JSON key: text}."""
    fill(driver, "ask", values)
    driver.execute_script("document.getElementById('answer').dataset.state = ''")
    driver.find_element(By.CSS_SELECTOR, "#ask button[type=submit]").click()
    return shown_answer(driver)


def shown_answer(driver: Any) -> dict[str, str]:
    """The answer shown once it is current (answered, refined or given up on, for the form's question):
    {JSON key: the value as shown}."""
    wait(driver, lambda d: d.find_element(By.ID, "answer").get_attribute("data-state") == "current")
    return fields(driver)


def fields(driver: Any, part: str = "value") -> dict[str, str]:
    """The answer's fields as shown, read at once (a refining answer is redrawn): {JSON key: the
    text of each dd's ``part`` (value, gloss)}, in the page's order."""
    return dict(driver.execute_script(
        "return [...document.querySelectorAll('#answer dd')].map((e) => [e.dataset.key, "
        "e.querySelector('.' + arguments[0]).textContent])", part))


def shown_json(driver: Any) -> dict[str, Any]:
    """The exact JSON behind the answer shown (in its closed details: read as textContent)."""
    return json.loads(driver.find_element(By.ID, "json").get_attribute("textContent"))


# the side each shown number is rounded to (4 significant digits): up for a certified eps or delta,
# down for a lower bound and for the largest eps0 (eps0-max), the nearest for the rest
SIDES = {"eps": "up", "delta": "up", "eps_lower": "down", "delta_lower": "down", "eps0": "down"}


def same(text: str, value: Any, key: str = "") -> bool:
    """What the page shows for a JSON value: a number to 4 significant digits on its safe side
    (``SIDES``: never below the JSON's value for an upper bound, never above it for a lower bound
    or eps0), integers in full, null as unknown, a corner as name=value pairs."""
    if value is None:
        return text == "unknown"
    if isinstance(value, bool):
        return text == str(value).lower()
    if isinstance(value, int) or (key == "rounds"):
        return float(text) == value
    if isinstance(value, float):
        shown = float(text)
        if value == 0:
            return shown == 0
        close = abs(shown - value) <= 1e-3 * abs(value)  # 4 significant digits: within one unit of the 4th
        side = SIDES.get(key)
        return close and (side is None or (shown >= value if side == "up" else shown <= value))
    if isinstance(value, dict):
        known = {k: v for k, v in value.items() if v is not None}
        pairs = dict(part.split("=") for part in text.split(", ")) if known else {}
        return text == "none" if not known else pairs.keys() == known.keys() and all(
            same(pairs[k], v) for k, v in known.items())
    return text == value


def javascript_errors(driver: Any) -> list[dict[str, Any]]:
    return [e for e in driver.get_log("browser") if e["source"] == "javascript"]


@pytest.mark.parametrize(("question", "sources"), QUESTIONS, ids=["table", "refined", "live"])
def test_answers_shown_are_the_apis(browser: Any, base: str, question: dict[str, str], sources: set[str]) -> None:
    body = settled(base, "/v1/eps", question)
    assert body["source"] in sources
    browser.get(base + "/")
    shown = ask(browser, question)
    assert list(shown) == list(body)  # every field of the JSON, in its order
    assert all(same(shown[key], value, key) for key, value in body.items()), (shown, body)
    assert shown["eps"] != "unknown" and body["eps"] <= float(shown["eps"]) <= body["eps"] * (1 + 1e-3)
    assert shown_json(browser) == body  # the exact JSON, one click away
    note = browser.find_element(By.ID, "note")
    assert note.text.startswith("Certified:") and note.get_attribute("data-kind") == f"eps/{body['source']}"
    glosses = fields(browser, "gloss")
    assert list(glosses) == list(body) and all(glosses.values())  # each raw term in plain words
    assert not javascript_errors(browser)


def draw(driver: Any, values: dict[str, str], form: str = "curve") -> list[dict[str, str]]:
    """Fill a curve's form (``curve``: eps against n, ``rounds-curve``), press its Draw, wait for
    every answer; the SVG points' data attributes."""
    fill(driver, form, values)
    plot = PLOTS[form][0]
    driver.execute_script(f"document.getElementById('{plot}').dataset.state = ''")
    driver.find_element(By.CSS_SELECTOR, f"#{form} button[type=submit]").click()
    wait(driver, lambda d: d.find_element(By.ID, plot).get_attribute("data-state") == "done")
    return points(driver, form)


PLOTS = {"curve": ("plot", "progress"), "rounds-curve": ("rounds-plot", "rounds-progress")}


def points(driver: Any, form: str = "curve") -> list[dict[str, str]]:
    attributes = ("series", "x", "eps", "lower", "refined", "cx", "cy")
    return [{a: e.get_attribute(a if a in ("cx", "cy") else f"data-{a}") for a in attributes}
            for e in driver.find_elements(By.CSS_SELECTOR, f"#{PLOTS[form][0]} circle.point")]


# eps0 = 1: table answers (their stored lower bound 0 at these small n: no band); eps0 = 6, above
# the grid: live answers, each with the engine's lower bound (a band)
CURVE = {"curve_eps0": "1,6", "curve_n": "20,80", "curve_delta": "1e-6"}


def test_curve_points_are_api_answers_on_log_axes(browser: Any, base: str) -> None:
    ns = sorted({round(20 * 4 ** (i / 12)) for i in range(13)})  # 13 log-spaced n from 20 to 80
    table = {**KRR, "max_slack": "none"}  # table answers: each with its stored lower bound
    answers = {(eps0, n): settled(base, "/v1/eps", {**table, "eps0": eps0, "n": str(n), "delta": "1e-6"})
               for eps0 in ("1", "6") for n in ns}
    browser.get(base + "/")
    fill(browser, "ask", table)
    drawn = draw(browser, CURVE)
    assert all(p["refined"] == "true" for p in drawn)
    for eps0 in ("1", "6"):
        series = sorted((p for p in drawn if p["series"] == f"eps0 = {eps0}"), key=lambda p: int(p["x"]))
        assert [int(p["x"]) for p in series] == ns
        for p in series:
            body = answers[eps0, int(p["x"])]
            assert float(p["eps"]) == body["eps"]
            assert (p["lower"] == "" if body["eps_lower"] is None else float(p["lower"]) == body["eps_lower"])
        # log axes: x grows with log n at a constant step per factor, y falls as eps falls
        xs = [float(p["cx"]) for p in series]
        assert all(a < b for a, b in zip(xs, xs[1:], strict=False))
        slope = (xs[-1] - xs[0]) / math.log(80 / 20)
        assert all(abs(x - xs[0] - slope * math.log(n / 20)) < 0.01 for x, n in zip(xs, ns, strict=True))
        for p, q in zip(series, series[1:], strict=False):
            assert (float(p["eps"]) > float(q["eps"])) == (float(p["cy"]) < float(q["cy"]))
    assert len(browser.find_elements(By.CSS_SELECTOR, "#plot polyline.line")) == 2
    bands = [e0 for e0 in ("1", "6") if sum((answers[e0, n]["eps_lower"] or 0) > 0 for n in ns) > 1]
    assert bands == ["6"]  # a band where the API reports lower bounds, none where it reports 0
    assert len(browser.find_elements(By.CSS_SELECTOR, "#plot polygon.band")) == len(bands)
    assert not javascript_errors(browser)


ROUNDS = {**KRR, "eps0": "2", "n": "40", "delta": "1e-6"}  # a grid point: composed from the table


def test_rounds_curve_points_are_api_answers(browser: Any, base: str) -> None:
    ts = [1, 3, 10, 32, 100, 316, 1000]  # 7 log-spaced rounds from 1 to 1000
    answers = {t: settled(base, "/v1/eps", {**ROUNDS, "rounds": str(t)}) for t in ts}
    browser.get(base + "/")
    fill(browser, "ask", ROUNDS)
    drawn = draw(browser, {"curve_rounds": "1,1000"}, "rounds-curve")
    assert [int(p["x"]) for p in drawn] == ts
    assert {p["series"] for p in drawn} == {"eps0 = 2, n = 40"}
    assert [float(p["eps"]) for p in drawn] == [answers[t]["eps"] for t in ts]
    xs, ys = [float(p["cx"]) for p in drawn], [float(p["cy"]) for p in drawn]
    slope = (xs[-1] - xs[0]) / math.log(1000)
    assert all(abs(x - xs[0] - slope * math.log(t)) < 0.01 for x, t in zip(xs, ts, strict=True))  # log T
    # y follows eps (not always growing with T: the table's composition answers up to T = 316 here,
    # the engine at T = 1000, where the table's composed eps is infinite; both certified, live tighter)
    for i in range(len(ts) - 1):
        assert (float(drawn[i]["eps"]) < float(drawn[i + 1]["eps"])) == (ys[i] > ys[i + 1])
    assert not browser.find_elements(By.CSS_SELECTOR, "#rounds-plot polygon.band")  # no lower bound composed
    assert not javascript_errors(browser)


CLIPPED = """
const out = [];
for (const svg of document.querySelectorAll('.plot svg')) {
  const box = svg.getBoundingClientRect();
  for (const text of svg.querySelectorAll('text')) {
    const r = text.getBoundingClientRect();
    if (r.left < box.left - 0.5 || r.right > box.right + 0.5 || r.top < box.top - 0.5 || r.bottom > box.bottom + 0.5) {
      out.push(svg.parentElement.id + ': ' + text.textContent);
    }
  }
}
return out;
"""


def save_screenshots(driver: Any, folder: Path, name: str) -> None:
    """The whole page at phone (390) and desktop (1280) width (the plots redrawn for each width); a
    page scrolls down only and no plot text is clipped: every SVG text's box inside its SVG's."""
    def redrawn(driver: Any) -> bool:
        return all(abs(float(driver.find_element(By.CSS_SELECTOR, f"#{plot} svg").get_attribute("width")) -
                       driver.find_element(By.ID, plot).size["width"]) < 2 for plot in ("plot", "rounds-plot"))

    for width, label in ((390, "phone"), (1280, "desktop")):
        driver.set_window_size(width, 1000)
        wait(driver, redrawn)
        driver.set_window_size(width, driver.execute_script("return document.documentElement.scrollHeight"))
        wait(driver, redrawn)
        assert driver.execute_script("return document.documentElement.scrollWidth") <= width
        assert driver.execute_script("return document.documentElement.clientWidth") <= width
        assert driver.execute_script(CLIPPED) == [], label
        driver.save_screenshot(str(folder / f"page-{name}-{label}.png"))
    driver.set_window_size(1280, 1000)


@pytest.mark.parametrize(("form", "values", "field", "query"), [
    ("ask", {**KRR, "eps0": "-1", "n": "50", "delta": "1e-6"}, "eps0",
     {**KRR, "eps0": "-1", "n": "50", "delta": "1e-6"}),
    ("ask", {**KRR, "eps0": "1", "n": "50", "delta": "2"}, "delta", {**KRR, "eps0": "1", "n": "50", "delta": "2"}),
    ("ask", {"mechanism": "krr", "k": "1", "eps0": "1", "n": "50", "delta": "1e-6"}, "k",
     {"mechanism": "krr", "k": "1", "eps0": "1", "n": "50", "delta": "1e-6"}),
    ("ask", {"mechanism": "krr", "k": "", "eps0": "1", "n": "50", "delta": "1e-6"}, "k",
     {"mechanism": "krr", "eps0": "1", "n": "50", "delta": "1e-6"}),
    ("ask", {**KRR, "eps0": "1", "n": "50", "delta": "1e-6", "max_slack": "x"}, "max_slack",
     {**KRR, "eps0": "1", "n": "50", "delta": "1e-6", "max_slack": "x"}),
    ("curve", {**CURVE, "curve_eps0": "abc"}, "curve_eps0", {**KRR, "eps0": "abc", "n": "20", "delta": "1e-6"}),
    ("ask", {**KRR, "eps0": "1", "n": "50", "delta": "1e-6", "rounds": "0"}, "rounds",
     {**KRR, "eps0": "1", "n": "50", "delta": "1e-6", "rounds": "0"}),
    ("ask", {**KRR, "eps0": "1", "n": "50", "delta": "1e-6", "rounds": "3", "sample_rate": "2"}, "sample_rate",
     {**KRR, "eps0": "1", "n": "50", "delta": "1e-6", "rounds": "3", "sample_rate": "2"}),
])
def test_bad_input_shows_the_apis_message_beside_its_field(browser: Any, base: str, form: str,
                                                         values: dict[str, str], field: str,
                                                         query: dict[str, str]) -> None:
    browser.get(base + "/")
    if form == "curve":
        fill(browser, "ask", KRR)
        fill(browser, "curve", values)
    else:
        fill(browser, "ask", values)
    browser.find_element(By.CSS_SELECTOR, f"#{form} button[type=submit]").click()
    span = wait(browser, lambda d: (lambda e: e if e.text else None)(
        d.find_element(By.CSS_SELECTOR, f"[data-error={field}]")))
    status, body = api(base, "/v1/eps", query)
    assert status == 400 and span.text == body["error"]
    others = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "[data-error]") if e.text and e != span]
    assert not others
    if form == "ask":
        assert span.find_element(By.XPATH, "..").find_element(By.CSS_SELECTOR, "input, select").get_attribute(
            "aria-invalid") == "true"


def test_permalink_reproduces_the_state(browser: Any, base: str, screenshots: Path) -> None:
    question = {**KRR, "eps0": "2", "n": "50", "delta": "1e-6", "max_slack": "none", "rounds": "10"}
    rounds_curve = {"curve_rounds": "1,100"}
    browser.get(base + "/")
    first = ask(browser, question)
    assert first["rounds"] == "10"
    drawn = draw(browser, CURVE)
    by_rounds = draw(browser, rounds_curve, "rounds-curve")
    link = browser.find_element(By.ID, "permalink").get_attribute("href")
    state = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(link).query))
    assert state == {"endpoint": "eps", **question, **CURVE, **rounds_curve}  # the API's parameter names
    browser.get("about:blank")
    browser.get(link)
    assert shown_answer(browser) == first
    wait(browser, lambda d: len(points(d)) == len(drawn) and len(points(d, "rounds-curve")) == len(by_rounds))
    assert points(browser) == drawn and points(browser, "rounds-curve") == by_rounds
    for name, value in {**question, **CURVE, **rounds_curve}.items():
        assert browser.find_element(By.CSS_SELECTOR, f"[name={name}]").get_attribute("value") == value
    save_screenshots(browser, screenshots, "page")
    assert not javascript_errors(browser)


def test_other_questions_by_permalink(browser: Any, base: str) -> None:
    for endpoint, question in (("delta", {**KRR, "eps0": "1", "n": "50", "eps": "0.9"}),
                               ("eps0-max", {**KRR, "eps": "0.9", "n": "80", "delta": "1e-6"})):
        body = settled(base, f"/v1/{endpoint}", question)
        browser.get(f"{base}/?{urllib.parse.urlencode({'endpoint': endpoint, **question})}")
        shown = shown_answer(browser)
        assert list(shown) == list(body)
        assert all(same(shown[key], value, key) for key, value in body.items()), (shown, body)
        assert shown_json(browser) == body


def test_a_refused_live_question_shows_retry_after(browser: Any, start_server: Any) -> None:
    server = start_server("--live-workers", "1", "--queue", "1", "--retry-after", "7", slow=4.0)
    browser.get(server.base + "/")
    fill(browser, "ask", {**KRR, "eps0": "7", "n": "50", "delta": "1e-6"})
    holder = threading.Thread(target=api, args=(server.base, "/v1/eps", {**KRR, "eps0": "6", "n": "60",
                                                                        "delta": "1e-6"}))
    holder.start()  # takes the only live place for about 4 s
    try:
        wait(browser, lambda d: api(server.base, "/healthz", {})[1]["live_queue"] >= 1)
        browser.find_element(By.CSS_SELECTOR, "#ask button[type=submit]").click()
        span = wait(browser, lambda d: (lambda e: e if e.text else None)(
            d.find_element(By.CSS_SELECTOR, "[data-error=form]")))
        assert span.text.startswith("The server is busy:") and "wait 7 s" in span.text
        assert browser.find_element(By.ID, "answer").get_attribute("hidden") is not None
    finally:
        holder.join(WAIT)


# A stub of the page's fetch (installed after the page loaded): ``rules`` ({text in the URL: {"delay":
# ms before asking the server, "unrefined": how many answers are sent as the table's unrefined one
# (eps 1.5 times the server's, "refined": false), "body": a JSON body sent instead of the server's}});
# window.__asked counts the requests per rule
STUB = """
window.__realFetch = window.__realFetch || window.fetch.bind(window);
const rules = arguments[0], real = window.__realFetch;
window.__asked = {};
window.fetch = async (url, options) => {
  const rule = Object.keys(rules).find((text) => String(url).includes(text));
  if (rule === undefined) return real(url, options);
  const asked = window.__asked[rule] = (window.__asked[rule] || 0) + 1;
  const {delay = 0, unrefined = 0, body} = rules[rule];
  await new Promise((resolve) => setTimeout(resolve, delay));
  if (body) return new Response(JSON.stringify(body), {status: 200, headers: {"Content-Type": "application/json"}});
  const response = await real(url, options);
  const answer = await response.json();
  if (asked <= unrefined) Object.assign(answer, {eps: answer.eps * 1.5, refined: false});
  return new Response(JSON.stringify(answer), {status: response.status, headers: {"Content-Type": "application/json"}});
};
"""


def state(driver: Any, element: str = "answer") -> str:
    return driver.find_element(By.ID, element).get_attribute("data-state")


def test_a_stale_answer_is_never_shown_as_current(browser: Any, base: str) -> None:
    first = {**KRR, "eps0": "2", "n": "40", "delta": "1e-6", "max_slack": "none"}
    browser.get(base + "/")
    ask(browser, first)
    fill(browser, "ask", {"n": "80"})  # the form changes: the answer to n = 40 greyed at once
    assert state(browser) == "stale"
    assert "The form has changed" in browser.find_element(By.ID, "answer-status").text
    assert float(browser.execute_script(
        "return getComputedStyle(document.querySelector('#answer .result')).opacity")) < 0.5
    fill(browser, "ask", {"n": "40"})  # back to the question answered: current again
    assert state(browser) == "current"
    # a slow answer to n = 50, then n = 60 asked: Ask clears the answer at once, and the late
    # answer to n = 50 is dropped
    browser.execute_script(STUB, {"n=50&": {"delay": 1500}})
    fill(browser, "ask", {"n": "50"})
    browser.find_element(By.CSS_SELECTOR, "#ask button[type=submit]").click()
    assert state(browser) == "asking"
    assert not browser.find_elements(By.CSS_SELECTOR, "#answer dd") and not browser.find_element(By.ID, "headline").text
    assert browser.find_element(By.ID, "answer-status").text.startswith("Asking")
    shown = ask(browser, {"n": "60"})
    wait(browser, lambda d: d.execute_script("return window.__asked['n=50&']") == 1)
    time.sleep(2)  # the answer to n = 50 has come by now
    assert state(browser) == "current" and shown_answer(browser) == shown
    body = settled(base, "/v1/eps", {**first, "n": "60"})
    assert shown_json(browser) == body
    assert "n = 60" in browser.find_element(By.ID, "asked").text
    assert not javascript_errors(browser)


VIA = {"eps": 0.06578499199522776, "eps_lower": None, "certified": True, "source": "table",
       "corner": {"eps0": 1.0, "n": 40.0, "delta": 1e-6, "delta_upper": 1e-5}, "slack": 0.4, "edge": False,
       "refined": False, "via": "generic",
       "asked": {"mechanism": "krr", "k": 3.0, "eps0": 1.0, "n": 40.0, "delta": 3e-6}}  # as the server parses it


@pytest.mark.parametrize(("endpoint", "question", "kind", "says", "never"), [
    ("eps", {**KRR, "eps0": "3", "n": "30", "delta": "1e-6", "max_slack": "none"}, "eps/table",
     ["ε0 rounded up to the grid (4)", "n rounded down to the grid (20)", "chord"], ["rounded DOWN", "rounds"]),
    ("eps0-max", {**KRR, "eps": "0.9", "n": "80", "delta": "1e-6", "max_slack": "none"}, "eps0-max/table",
     ["ε0 is rounded down to the grid", "any ε0 up to it"], ["ε0 rounded up", "shown rounded up"]),
    ("delta", {**KRR, "eps0": "1", "n": "50", "eps": "0.9", "max_slack": "none"}, "delta/table",
     ["ε0 1 on the grid", "n rounded down to the grid (40)", "δ at ε = 0.9"], ["rounded DOWN"]),
    ("eps", {**ROUNDS, "rounds": "10", "max_slack": "none"}, "composed/table",
     ["Composed over 10 rounds", "no δ corner", "all the rounds together", "no lower bound"],
     ["between the grid deltas", "δ on the grid"]),
    ("eps", {**KRR, "eps0": "6", "n": "50", "delta": "1e-6"}, "eps/live", ["Live: computed now by the engine"],
     ["rounded up to the grid", "chord"]),
    ("eps", {**KRR, "eps0": "1", "n": "40", "delta": "3e-6", "via": "stub"}, "eps/via-generic",
     ["Via generic", "holds for every ε0-LDP randomizer", "no lower bound for this mechanism", "Not refined yet"],
     []),
], ids=["eps", "eps0-max", "delta", "rounds", "live", "via-generic"])
def test_each_explanation_matches_its_question(browser: Any, base: str, endpoint: str, question: dict[str, str],
                                               kind: str, says: list[str], never: list[str]) -> None:
    """The note says what the answer is for its kind of question; a via-generic answer (the test
    table has no mechanism that needs one) is a stubbed response, kept unrefined."""
    browser.get(f"{base}/?endpoint={endpoint}")
    stubbed = question.pop("via", None)
    if stubbed:
        browser.execute_script(STUB, {"v1/eps?": {"body": VIA}})
    else:
        body = settled(base, f"/v1/{endpoint}", question)
    fill(browser, "ask", {"endpoint": endpoint, **question})
    browser.find_element(By.CSS_SELECTOR, "#ask button[type=submit]").click()
    if stubbed:  # refining: asked again every 0.3 s, always unrefined
        wait(browser, lambda d: d.execute_script("return window.__asked['v1/eps?']") >= 3)
        assert state(browser) == "refining"
        body = VIA
        assert fields(browser, "gloss")["eps_lower"].startswith("none for krr")
        shown = fields(browser)
        assert shown["eps"] == "0.06579"  # 4 significant digits, rounded up
    else:
        shown = shown_answer(browser)
    assert all(same(shown[key], value, key) for key, value in body.items()), (shown, body)
    note = browser.find_element(By.ID, "note")
    assert note.get_attribute("data-kind") == kind, note.text
    assert all(text in note.text for text in says), note.text
    assert not any(text in note.text for text in never), note.text
    assert not javascript_errors(browser)


# (answer, key, shown): 4 significant digits, a certified eps or delta rounded up, a lower bound or
# the largest eps0 down
ROUNDED = [({"eps": 0.06578499199522776}, "eps", "0.06579"),
           ({"eps": 0.0027313232421875, "eps_lower": 0.0025191307067871094}, "eps_lower", "0.002519"),
           ({"eps": 0.99996}, "eps", "1"), ({"eps": 9.9996}, "eps", "10"), ({"eps": 0.5}, "eps", "0.5"),
           ({"eps": 3.0}, "eps", "3"), ({"eps": 2.345e-7}, "eps", "2.345e-7"),
           ({"eps": 2.3451e-7, "eps_lower": 1.00001e-7}, "eps_lower", "1e-7"), ({"eps": 2.3451e-7}, "eps", "2.346e-7"),
           ({"delta": 1.000000000001e-12, "delta_lower": 0.0}, "delta", "1.001e-12"),
           ({"eps0": 8.499271994496706}, "eps0", "8.499"), ({"eps0": 1.00009}, "eps0", "1"),
           ({"eps0": 0.99999}, "eps0", "0.9999")]


def test_numbers_shown_are_rounded_on_their_safe_side(browser: Any, base: str) -> None:
    """Stubbed answers (``ROUNDED``): each number shown as expected, parsed back on the safe side of
    the JSON's, in the headline too, the exact JSON one click away."""
    browser.get(base + "/")
    fill(browser, "ask", {**KRR, "eps0": "1", "n": "40", "delta": "1e-6"})
    for body, key, text in ROUNDED:
        endpoint = "eps0-max" if "eps0" in body else "delta" if "delta" in body else "eps"
        answer = {**body, "certified": True, "source": "live", "corner": {}, "slack": 0.0, "edge": False}
        browser.execute_script(STUB, {f"v1/{endpoint}?": {"body": answer}})
        fill(browser, "ask", {"endpoint": endpoint})
        fill(browser, "ask", {"eps": "0.5"} if endpoint != "eps" else {})
        shown = ask(browser, {})
        assert shown[key] == text and same(text, body[key], key), (body, shown)
        assert key.endswith("_lower") or f"{text} " in browser.find_element(By.ID, "headline").text + " "
        assert shown_json(browser) == answer


def test_unrefined_answers_and_points_refine_themselves(browser: Any, base: str) -> None:
    """An answer "refined": false is shown at once as refining, asked again every 0.3 s, and replaced
    by the refined one; so are a curve's hollow points."""
    question = {**KRR, "eps0": "2", "n": "40", "delta": "1e-6", "max_slack": "none"}
    body = settled(base, "/v1/eps", question)
    browser.get(base + "/")
    browser.execute_script(STUB, {"v1/eps?": {"unrefined": 3}})
    fill(browser, "ask", question)
    browser.find_element(By.CSS_SELECTOR, "#ask button[type=submit]").click()
    wait(browser, lambda d: state(d) == "refining", poll=0.05)
    assert browser.find_element(By.ID, "answer-status").text.startswith("Refining")
    assert browser.find_element(By.CSS_SELECTOR, "dd[data-key=refined] .value").text == "false"
    shown = shown_answer(browser)
    assert browser.execute_script("return window.__asked['v1/eps?']") == 4  # 3 unrefined, then the refined one
    assert "refined" not in shown and same(shown["eps"], body["eps"], "eps") and shown_json(browser) == body
    assert browser.find_element(By.ID, "answer-status").text.startswith("Refined by the server")
    # a curve whose first answers are all unrefined: drawn hollow, then refined in place
    browser.execute_script(STUB, {"v1/eps?": {"unrefined": 26}})  # twice each point
    fill(browser, "curve", {**CURVE, "curve_eps0": "1"})
    browser.find_element(By.CSS_SELECTOR, "#curve button[type=submit]").click()
    wait(browser, lambda d: state(d, "plot") == "refining", poll=0.05)
    assert browser.find_elements(By.CSS_SELECTOR, "#plot circle.unrefined")
    wait(browser, lambda d: state(d, "plot") == "done")
    drawn = points(browser)
    assert len(drawn) == 13 and all(p["refined"] == "true" for p in drawn)
    for p in drawn:
        assert float(p["eps"]) == settled(base, "/v1/eps", {**question, "eps0": "1", "n": p["x"]})["eps"]
    assert not javascript_errors(browser)


def test_curves_name_their_mechanism_and_delta_and_clear_when_the_question_changes(browser: Any, base: str) -> None:
    browser.get(base + "/")
    fill(browser, "ask", {**ROUNDS, "max_slack": "none"})
    draw(browser, {**CURVE, "curve_eps0": "1"})
    draw(browser, {"curve_rounds": "1,100"}, "rounds-curve")
    title = browser.find_element(By.CSS_SELECTOR, "#plot .plot-title").text
    assert title.startswith("krr k=3:") and "δ = 1e-6" in title and "one round" in title
    assert "krr k=3" in browser.find_element(By.CSS_SELECTOR, "#plot svg").get_attribute("aria-label")
    rounds_title = browser.find_element(By.CSS_SELECTOR, "#rounds-plot .plot-title").text
    assert rounds_title.startswith("krr k=3:") and "δ = 1e-6 for all T rounds" in rounds_title
    fill(browser, "ask", {"eps0": "1"})  # the rounds curve's question: it goes, eps against n stays
    assert state(browser, "rounds-plot") == "cleared" and not browser.find_elements(By.CSS_SELECTOR, "#rounds-plot *")
    assert state(browser, "plot") == "done" and len(points(browser)) == 13
    fill(browser, "curve", {"curve_delta": "1e-5"})  # the curve's own delta: it goes too
    assert state(browser, "plot") == "cleared" and not points(browser)
    draw(browser, {"curve_delta": "1e-5"})
    assert "δ = 1e-5" in browser.find_element(By.CSS_SELECTOR, "#plot .plot-title").text
    fill(browser, "ask", {"k": "4"})  # the mechanism: both curves go
    assert state(browser, "plot") == "cleared" and not points(browser)
    link = browser.find_element(By.ID, "permalink").get_attribute("href")
    assert "curve_" not in link  # a cleared curve is not in the permalink
    assert not javascript_errors(browser)


def test_the_page_opens_on_a_common_question(browser: Any, base: str) -> None:
    """k-RR k=10, eps0 1, n 1e6, delta 1e-8 in the form; not asked here (the test table does not
    hold it, and the page asks only a question the table answers at once)."""
    browser.get(base + "/")
    values = {name: browser.find_element(By.CSS_SELECTOR, f"#ask [name={name}]").get_attribute("value")
              for name in ("endpoint", "mechanism", "k", "eps0", "n", "delta")}
    assert values == {"endpoint": "eps", "mechanism": "krr", "k": "10", "eps0": "1", "n": "1000000",
                      "delta": "1e-8"}
    time.sleep(0.5)
    assert state(browser) == "empty" and browser.find_element(By.ID, "answer").get_attribute("hidden") is not None


SHIPPED = Path(__file__).resolve().parents[3] / "data" / "default.zarr"


@pytest.mark.skipif(not SHIPPED.exists(), reason="the shipped default table is not in this checkout")
def test_the_shipped_table_answers_the_opening_question_at_once(browser: Any, start_server: Any) -> None:
    """On the shipped table (its own --table, given last) the opening question is a grid point:
    asked on opening, answered from the table with nothing rounded."""
    server = start_server("--table", str(SHIPPED), "--live-workers", "1")
    question = {"mechanism": "krr", "k": "10", "eps0": "1", "n": "1000000", "delta": "1e-8"}
    body = settled(server.base, "/v1/eps", question)
    browser.get(server.base + "/")
    shown = shown_answer(browser)
    assert shown_json(browser) == body and body["source"] == "table" and body["slack"] == 0
    assert all(same(shown[key], value, key) for key, value in body.items()), (shown, body)
    assert browser.find_element(By.ID, "asked").text == (
        "Answer to: ε at δ, krr k=10, eps0 = 1, n = 1000000, delta = 1e-8")
    note = browser.find_element(By.ID, "note")
    assert note.get_attribute("data-kind") == "eps/table" and "nothing rounded" in note.text
    assert browser.find_element(By.ID, "headline").text.startswith(f"ε ≤ {shown['eps']} at δ = 1e-8")
    assert not javascript_errors(browser)


def test_page_and_assets_are_served_with_etags(base: str) -> None:
    for path, kind in (("/", "text/html"), ("/static/page.js", "text/javascript"), ("/static/page.css", "text/css")):
        with urllib.request.urlopen(base + path, timeout=WAIT) as response:
            assert response.status == 200 and response.headers["Content-Type"].startswith(kind)
            etag = response.headers["ETag"]
            assert "default-src 'self'" in response.headers["Content-Security-Policy"]
        request = urllib.request.Request(base + path, headers={"If-None-Match": etag})
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(request, timeout=WAIT)
        assert err.value.code == 304


def test_registry_lists_each_mechanisms_parameters(monkeypatch: pytest.MonkeyPatch) -> None:
    from lookup.answer import live as live_engine
    from tablegen.mechanisms import MECHANISMS

    engine = registry({})
    assert list(engine) == [*MECHANISMS, "gaussian"] and [p["name"] for p in engine["krr"]] == ["k"]
    assert [(p["name"], p.get("replaces"), p.get("fixed")) for p in engine["gaussian"]] == [
        ("sigma", "eps0", None), ("inputs", None, True)]
    assert engine["krr"][0]["required"] and not engine["olh"][0]["required"]
    monkeypatch.setattr(live_engine, "available", lambda: False)  # without the engine: the table's rows
    rows = registry({"mechanisms": ["generic", "krr k=3", "krr k=10", "joint base=krr k=3 parts=2"]})
    assert {m: [p["name"] for p in ps] for m, ps in rows.items()} == {
        "generic": [], "krr": ["k"], "joint": ["base", "k", "parts"]}


GAUSSIAN = {"mechanism": "gaussian", "sigma": "1", "n": "1000", "delta": "1e-6"}


def test_gaussian_is_asked_by_sigma_without_eps0(browser: Any, base: str) -> None:
    """gaussian in the form: sigma in place of eps0 (eps0 and sample_rate hidden, never sent), inputs
    stated as bits with why unit is not offered; its live answer with its lower bound, and T rounds
    composed, shown as the API gives them; a bad sigma beside its field; eps against n, one series
    per sigma, each point the API's answer."""
    body = settled(base, "/v1/eps", GAUSSIAN)
    assert body["source"] == "live" and body["eps_lower"] > 0
    browser.get(base + "/")
    shown = ask(browser, GAUSSIAN)
    assert list(shown) == list(body) and all(same(shown[key], value, key) for key, value in body.items())
    assert shown_json(browser) == body
    for name in ("eps0", "sample_rate"):
        assert not browser.find_element(By.CSS_SELECTOR, f"#ask [name={name}]").is_displayed()
    fixed = browser.find_element(By.CSS_SELECTOR, "#params .fixed[data-field=inputs]").text
    assert fixed.startswith("inputs = unit") and "bits (x in {0, 1}) get the same certified numbers" in fixed
    sent = urllib.parse.parse_qs(urllib.parse.urlsplit(browser.find_element(By.ID, "api-link").get_attribute(
        "href")).query)
    assert set(sent) == set(GAUSSIAN)  # no eps0, no inputs (unit, the API's default)
    assert browser.find_element(By.ID, "asked").text == (
        "Answer to: ε at δ, gaussian sigma=1, n = 1000, delta = 0.000001")  # as the server parsed it
    assert f"(the exact ε is at least {shown['eps_lower']})" in browser.find_element(By.ID, "headline").text
    assert browser.find_element(By.ID, "note").get_attribute("data-kind") == "eps/live"
    composed = settled(base, "/v1/eps", {**GAUSSIAN, "rounds": "3"})
    shown = ask(browser, {"rounds": "3"})
    assert all(same(shown[key], value, key) for key, value in composed.items()) and shown_json(browser) == composed
    note = browser.find_element(By.ID, "note")
    assert note.get_attribute("data-kind") == "composed/live" and "at your exact sigma and n" in note.text
    fill(browser, "ask", {"rounds": "", "sigma": "0.1"})
    browser.find_element(By.CSS_SELECTOR, "#ask button[type=submit]").click()
    span = wait(browser, lambda d: (lambda e: e if e.text else None)(d.find_element(By.CSS_SELECTOR,
                                                                                     "[data-error=sigma]")))
    assert span.text == api(base, "/v1/eps", {**GAUSSIAN, "sigma": "0.1"})[1]["error"]
    fill(browser, "ask", {"sigma": "1"})
    assert browser.find_element(By.ID, "curve-series").text == "sigma"
    drawn = draw(browser, {**CURVE, "curve_eps0": "1,2"})
    assert {p["series"] for p in drawn} == {"sigma = 1", "sigma = 2"} and len(drawn) == 26
    for p in drawn:
        sigma = p["series"].split(" = ")[1]
        assert float(p["eps"]) == settled(base, "/v1/eps", {**GAUSSIAN, "sigma": sigma, "n": p["x"]})["eps"]
    assert browser.find_element(By.CSS_SELECTOR, "#plot .plot-title").text.startswith("gaussian: certified ε")
    assert not javascript_errors(browser)


def test_the_page_files_ship_in_the_distributions() -> None:
    """Every file of lookup/service/static is named by an ``include`` of MANIFEST.in (the sdist and wheel)."""
    root = Path(__file__).resolve().parents[3]
    included = {path for line in (root / "MANIFEST.in").read_text().splitlines() if line.startswith("include ")
                for pattern in line.split()[1:] for path in root.glob(pattern)}
    static = set((root / "lookup" / "service" / "static").iterdir())
    assert static and static <= included


def test_the_page_shows_the_question_as_the_server_parsed_it(browser: Any, base: str) -> None:
    """Issue 55: the page echoed the text typed (``delta = 1e-৪``, which reads as 1e-8) while the
    server answered at what it parsed (1e-4).  Now it shows the answer's "asked": here an answer
    whose parsed delta differs from the text typed is shown with the parsed one; a look-alike digit
    is refused beside its field."""
    question = {**KRR, "eps0": "2", "n": "40", "delta": "1e-6", "max_slack": "none"}
    body = settled(base, "/v1/eps", question)
    assert body["asked"]["delta"] == 1e-6
    browser.get(base + "/")
    browser.execute_script(STUB, {"delta=1e-6": {"body": {**body, "asked": {**body["asked"], "delta": 1e-8}}}})
    ask(browser, question)
    asked = browser.find_element(By.ID, "asked").text
    assert "delta = 1e-8" in asked and "1e-6" not in asked, asked
    assert "δ = 1e-8" in browser.find_element(By.ID, "headline").text
    browser.get(f"{base}/?{urllib.parse.urlencode({'endpoint': 'eps', **question, 'delta': '1e-৪'})}")
    span = wait(browser, lambda d: (lambda e: e if e.text else None)(d.find_element(By.CSS_SELECTOR,
                                                                                     "[data-error=delta]")))
    assert "ASCII digits" in span.text and not browser.find_element(By.ID, "headline").text
    assert not javascript_errors(browser)
