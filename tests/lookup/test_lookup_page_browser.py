"""The page of ``lookup serve`` (``GET /``, lookup/page.py) in a real headless Chromium (Debian's
``chromium`` and ``chromium-driver``, driven by selenium with the driver's path given, so nothing
is downloaded): the numbers shown for a table, a refined and a live answer are those of the
``/v1/eps`` JSON for the same query; a curve's SVG points are ``/v1/eps`` answers, placed on log
axes, and so are the eps-against-rounds curve's (``rounds=T``); a bad input shows the API's message
beside the field it names; a refused live question shows the Retry-After; the permalink
reproduces the state, rounds included.  Screenshots (1280 and 390 pixels
wide) go to ``$SHUFFLE_EPS_PAGE_SCREENSHOTS`` or a temporary folder."""

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

from lookup import trust
from lookup.manifest import read_manifest
from lookup.page import registry

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
    budget comes with ``"refined": false`` and its refinement is kept for the next question, so the
    question is asked until two answers in a row are equal and refined (at most ``WAIT`` s)."""
    deadline, last = time.monotonic() + WAIT, None
    while time.monotonic() < deadline:
        status, body = api(base, path, query)
        assert status == 200, body
        if body == last and body.get("refined") is not False:
            return body
        last = body
        time.sleep(0.1)
    raise AssertionError(f"{path} {query} did not settle: {last}")


@pytest.fixture(scope="module", autouse=True)
def cache_home(table_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A cache home of this module's own (the servers inherit it), where the session table is
    recorded as built here (lookup.trust; provenance itself is tested in test_lookup_trust*.py)."""
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


def wait(driver: Any, condition: Any) -> Any:
    """``condition`` true within ``WAIT`` s; an element replaced meanwhile (the plot redrawn) is looked up again."""
    return WebDriverWait(driver, WAIT, ignored_exceptions=(StaleElementReferenceException,)).until(condition)


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
    driver.execute_script("document.querySelector('#answer dl').replaceChildren()")
    driver.find_element(By.CSS_SELECTOR, "#ask button[type=submit]").click()
    return shown_answer(driver)


def shown_answer(driver: Any) -> dict[str, str]:
    wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#answer dd[data-key=source]"))
    keys = [e.text for e in driver.find_elements(By.CSS_SELECTOR, "#answer dt")]
    return dict(zip(keys, (e.text for e in driver.find_elements(By.CSS_SELECTOR, "#answer dd")), strict=True))


def same(text: str, value: Any) -> bool:
    """What the page shows for a JSON value: numbers that parse to the same float, null as unknown."""
    if value is None:
        return text == "unknown"
    if isinstance(value, bool):
        return text == str(value).lower()
    if isinstance(value, int | float):
        return float(text) == value
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
    assert all(same(shown[key], value) for key, value in body.items()), (shown, body)
    assert shown["eps"] != "unknown" and float(shown["eps"]) == body["eps"]
    note = browser.find_element(By.ID, "note").text
    assert note.startswith("Certified:") and f"Source {body['source']}:" in note
    assert not javascript_errors(browser)


def draw(driver: Any, values: dict[str, str], form: str = "curve") -> list[dict[str, str]]:
    """Fill a curve's form (``curve``: eps against n, ``rounds-curve``), press its Draw, wait for
    every answer; the SVG points' data attributes."""
    fill(driver, form, values)
    driver.find_element(By.CSS_SELECTOR, f"#{form} button[type=submit]").click()
    progress = PLOTS[form][1]
    wait(driver, lambda d: (lambda t: t and t.split(" of ")[0] == t.split(" of ")[1].split()[0])(
        d.find_element(By.ID, progress).text))
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


def save_screenshots(driver: Any, folder: Path, name: str) -> None:
    """The whole page at phone (390) and desktop (1280) width (the plot redrawn for each width); a
    phone-width page scrolls down only."""
    for width, label in ((390, "phone"), (1280, "desktop")):
        driver.set_window_size(width, 1000)
        height = driver.execute_script("return document.documentElement.scrollHeight")
        driver.set_window_size(width, height)
        wait(driver, lambda d, width=width: abs(float(d.find_element(By.CSS_SELECTOR, "#plot svg").get_attribute(
            "width")) - d.find_element(By.ID, "plot").size["width"]) < 2)
        assert driver.execute_script("return document.documentElement.scrollWidth") <= width
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
        assert all(same(shown[key], value) for key, value in body.items()), (shown, body)


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
    from lookup import live as live_engine
    from tablegen.mechanisms import MECHANISMS

    engine = registry({})
    assert list(engine) == list(MECHANISMS) and [p["name"] for p in engine["krr"]] == ["k"]
    assert engine["krr"][0]["required"] and not engine["olh"][0]["required"]
    monkeypatch.setattr(live_engine, "available", lambda: False)  # without the engine: the table's rows
    rows = registry({"mechanisms": ["generic", "krr k=3", "krr k=10", "joint base=krr k=3 parts=2"]})
    assert {m: [p["name"] for p in ps] for m, ps in rows.items()} == {
        "generic": [], "krr": ["k"], "joint": ["base", "k", "parts"]}


def test_the_page_files_ship_in_the_distributions() -> None:
    """Every file of lookup/static is named by an ``include`` of MANIFEST.in (the sdist and wheel)."""
    root = Path(__file__).resolve().parents[2]
    included = {path for line in (root / "MANIFEST.in").read_text().splitlines() if line.startswith("include ")
                for pattern in line.split()[1:] for path in root.glob(pattern)}
    static = set((root / "lookup" / "static").iterdir())
    assert static and static <= included
