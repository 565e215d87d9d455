"""The browser page at ``/``, in Debian's headless chromium (through Debian's chromium-driver and
selenium) against a real ``fanout serve`` over a graph the real consumers applied: what it
shows, paging, moving around the graph by clicking, pasting a token when auth is on, and
deleting one's own posts. Screenshots go to the test's tmp dir."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait
from starlette.testclient import TestClient

from tests.api.conftest import SECRET, hs256
from tests.api.live import consume, publish
from tests.api.test_serve import serving
from tests.kafka_helpers import read_topic
from timeline_fanout.cli.settings import Settings
from timeline_fanout.schemas import PostDeleted, decode_event

CHROMIUM = "/usr/bin/chromium"
DRIVER = "/usr/bin/chromedriver"
POSTS = 25  # more than a page (20): paging is needed to see them all


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    missing = [path for path in (CHROMIUM, DRIVER) if not shutil.which(path)]
    if missing:
        pytest.skip(f"no browser: {', '.join(missing)} missing (.ci/bootstrap installs them)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(arg)
    options.add_argument("--window-size=1280,900")
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def wait_for(driver: WebDriver, what: str, condition: object, timeout: float = 15) -> None:
    WebDriverWait(driver, timeout).until(lambda d: condition(d), message=what)  # type: ignore[operator]


def texts(driver: WebDriver, list_id: str) -> list[str]:
    return [li.text for li in driver.find_elements(By.CSS_SELECTOR, f"#{list_id} > li")]


def shown(driver: WebDriver, element_id: str) -> str:
    return str(driver.find_element(By.ID, element_id).text)


def live_graph(settings: Settings) -> None:
    """alice follows bob and carol; bob posts 20, carol 5; dave and erin follow alice; erin
    follows dave and posted once."""
    follows = [("alice", "bob"), ("alice", "carol"), ("dave", "alice"), ("erin", "alice")]
    follows.append(("erin", "dave"))
    posts = [("bob" if i < 20 else "carol", f"p{i:02d}") for i in range(POSTS)]
    posts.append(("dave", "d1"))
    publish(
        settings,
        [{"type": "follow", "follower": a, "followee": b} for a, b in follows]
        + [{"type": "post", "author": a, "post_id": p} for a, p in posts],
    )
    consume(settings, graph=len(follows), posts=len(posts))


def test_the_page_shows_a_timeline_lists_and_lag_and_moves_around_the_graph(
    settings: Settings, browser: WebDriver, tmp_path: Path
) -> None:
    live_graph(settings)
    with serving(settings) as (base, _):
        browser.get(f"{base}/#user=alice")
        wait_for(browser, "a first page of alice's timeline", lambda d: len(texts(d, "timeline")))
        assert shown(browser, "current-user") == "alice"
        first = texts(browser, "timeline")
        assert len(first) == 20 and first[0].startswith("carol p24")  # newest first
        wait_for(browser, "counts", lambda d: shown(d, "following-count") == "2")
        assert texts(browser, "following") == ["bob", "carol"]
        assert shown(browser, "followers-count") == "2"
        assert texts(browser, "followers") == ["dave", "erin"]
        stats = (By.CSS_SELECTOR, "#stats tr")
        wait_for(browser, "both consumers' lag", lambda d: len(d.find_elements(*stats)) == 2)
        rows = {
            row.get_attribute("data-consumer"): row.text for row in browser.find_elements(*stats)
        }
        assert set(rows) == {"graph", "fanout"}
        assert rows["graph"].split()[1] == "0" and rows["fanout"].split()[1] == "0"  # no lag
        browser.save_screenshot(str(tmp_path / "alice.png"))

        browser.find_element(By.ID, "timeline-more").click()
        wait_for(browser, "the second page", lambda d: len(texts(d, "timeline")) == POSTS)
        ids = [line.split()[1] for line in texts(browser, "timeline")]
        assert ids == [f"p{i:02d}" for i in reversed(range(POSTS))]
        assert not browser.find_element(By.ID, "timeline-more").is_displayed()
        assert browser.find_element(By.ID, "timeline-end").is_displayed()

        browser.find_element(By.LINK_TEXT, "dave").click()  # a follower of alice
        wait_for(browser, "dave's page", lambda d: shown(d, "current-user") == "dave")
        wait_for(browser, "dave's lists", lambda d: shown(d, "followers-count") == "1")
        assert texts(browser, "followers") == ["erin"]
        # The two lists load separately: one shown says nothing of the other.
        wait_for(browser, "dave's following", lambda d: shown(d, "following-count") == "1")
        browser.find_element(By.LINK_TEXT, "erin").click()
        wait_for(browser, "erin's timeline", lambda d: texts(d, "timeline") != [])
        assert texts(browser, "timeline")[0].startswith("dave d1")
        browser.back()  # the user shown lives in the URL
        wait_for(browser, "back at dave's", lambda d: shown(d, "current-user") == "dave")
        assert shown(browser, "error") == ""
        browser.save_screenshot(str(tmp_path / "dave.png"))
    assert (tmp_path / "alice.png").stat().st_size > 10_000


MARKUP = '<img src=x onerror="window.ran=1"><script>window.ran=2</script>'


def test_posts_are_shown_with_their_texts_as_text_never_run(
    settings: Settings, browser: WebDriver
) -> None:
    publish(
        settings,
        [
            {"type": "follow", "follower": "fan", "followee": "dave"},
            {"type": "post", "author": "dave", "post_id": "d1", "text": "plain words"},
            {"type": "post", "author": "dave", "post_id": "d2", "text": MARKUP},
        ],
    )
    consume(settings, graph=1, posts=2)
    with serving(settings) as (base, _):
        browser.get("about:blank")
        browser.get(f"{base}/#user=dave")
        wait_for(browser, "dave's posts", lambda d: len(texts(d, "posts")) == 2)
        assert shown(browser, "posts-user") == "dave"
        newest, oldest = texts(browser, "posts")
        assert newest.startswith(f"d2 {MARKUP}") and oldest.startswith("d1 plain words")
        assert browser.execute_script("return window.ran") is None  # shown, never run
        assert browser.find_elements(By.CSS_SELECTOR, "#posts img, #posts script") == []
        assert shown(browser, "error") == ""
        browser.get("about:blank")
        browser.get(f"{base}/#user=fan")  # the same posts in a follower's home timeline
        wait_for(browser, "fan's timeline", lambda d: len(texts(d, "timeline")) == 2)
        newest, oldest = texts(browser, "timeline")
        assert newest.startswith(f"dave d2 {MARKUP}") and oldest.startswith("dave d1 plain")
        assert browser.execute_script("return window.ran") is None
        assert browser.find_elements(By.CSS_SELECTOR, "#timeline img, #timeline script") == []


def delete_buttons(driver: WebDriver) -> list[WebElement]:
    return list(driver.find_elements(By.CSS_SELECTOR, "#posts > li > button.delete"))


def test_own_posts_have_a_delete_button_that_publishes_the_deletion(
    settings: Settings, browser: WebDriver
) -> None:
    """With dave's token: a Delete on each of dave's posts and none on erin's; a click publishes
    the post's deletion through the API (read back from the posts topic, keyed by dave) and
    reloads the section."""
    publish(
        settings,
        [
            {"type": "follow", "follower": "fan", "followee": "dave"},
            {"type": "post", "author": "dave", "post_id": "d1"},
            {"type": "post", "author": "dave", "post_id": "d2"},
            {"type": "post", "author": "erin", "post_id": "e1"},
        ],
    )
    consume(settings, graph=1, posts=3)
    with serving(settings, FANOUT_API_JWT_SECRET=SECRET) as (base, _):
        browser.get("about:blank")
        browser.get(f"{base}/")
        browser.find_element(By.ID, "token").send_keys(hs256("dave", "fanout:publish"))
        browser.find_element(By.ID, "user").click()  # leaving the field commits the token
        browser.get(f"{base}/#user=erin")
        wait_for(browser, "erin's post", lambda d: len(texts(d, "posts")) == 1)
        assert delete_buttons(browser) == []  # dave's token may not delete erin's post
        browser.get(f"{base}/#user=dave")
        wait_for(browser, "dave's posts", lambda d: len(texts(d, "posts")) == 2)
        assert [b.text for b in delete_buttons(browser)] == ["Delete", "Delete"]
        browser.execute_script(
            "document.querySelectorAll('#posts > li').forEach(li => li.dataset.before = '1')"
        )
        delete_buttons(browser)[0].click()  # d2, the newest
        reloaded = (By.CSS_SELECTOR, "#posts > li[data-before]")
        wait_for(browser, "the posts reloaded", lambda d: d.find_elements(*reloaded) == [])
        assert shown(browser, "error") == ""
    sent = [
        (m.key(), decode_event(m.value()))
        for m in read_topic(settings.kafka, settings.topics.posts, 4)
    ]
    deleted = [(key, e.post_id) for key, e in sent if isinstance(e, PostDeleted)]
    assert deleted == [(b"dave", "d2")]


def test_with_auth_on_the_page_asks_for_a_token_and_uses_the_pasted_one(
    settings: Settings, browser: WebDriver, tmp_path: Path
) -> None:
    live_graph(settings)
    with serving(settings, FANOUT_API_JWT_SECRET=SECRET) as (base, _):
        browser.get(f"{base}/#user=alice")
        wait_for(browser, "the 401", lambda d: "401" in shown(d, "error"))
        assert "paste a bearer token" in shown(browser, "error")
        assert texts(browser, "timeline") == []
        wait_for(browser, "public lists", lambda d: shown(d, "followers-count") == "2")

        token = browser.find_element(By.ID, "token")
        token.send_keys(hs256("alice"))
        browser.find_element(By.ID, "user").click()  # leaving the field commits the token
        wait_for(browser, "the timeline", lambda d: len(texts(d, "timeline")) == 20)
        assert shown(browser, "error") == ""
        browser.save_screenshot(str(tmp_path / "alice-with-token.png"))

        browser.find_element(By.LINK_TEXT, "dave").click()  # alice's token is not dave's
        wait_for(browser, "the 403", lambda d: "403" in shown(d, "error"))
        assert texts(browser, "timeline") == []


def test_a_malformed_or_dotted_user_in_the_address_is_refused_and_the_page_runs_on(
    settings: Settings, browser: WebDriver
) -> None:
    """A fragment that does not decode must not stop the page (the consumers' lag still
    polls), and ``..`` as a user must not make it fetch another route with the token."""
    with serving(settings) as (base, _):
        browser.get("about:blank")
        browser.get(f"{base}/#user=%E0%A4%A")
        wait_for(browser, "the error", lambda d: "not valid" in shown(d, "error"))
        stats = (By.CSS_SELECTOR, "#stats > *")
        wait_for(browser, "the lag polled", lambda d: len(d.find_elements(*stats)) > 0)
        for dotted in ("..", ".", "%2E%2E"):
            browser.get("about:blank")
            browser.get(f"{base}/#user={dotted}")
            wait_for(browser, "the refusal", lambda d: "not a user id" in shown(d, "error"))
            wait_for(browser, "the lag polled", lambda d: len(d.find_elements(*stats)) > 0)
            fetched = browser.execute_script(
                "return performance.getEntriesByType('resource').map(e => e.name)"
            )
            paths = {url.removeprefix(base).split("?")[0] for url in fetched}
            assert paths <= {"/app.js", "/v1/stats"}, paths


def test_the_page_may_not_be_framed_and_sends_no_referrer(client: TestClient) -> None:
    for path in ("/", "/app.js"):
        headers = client.get(path).headers
        assert "frame-ancestors 'none'" in headers["content-security-policy"]
        assert headers["x-frame-options"] == "DENY"
        assert headers["referrer-policy"] == "no-referrer"
        assert headers["x-content-type-options"] == "nosniff"
