"""The page `seqc serve` serves at `/`, driven in a real headless browser (Debian's `chromium`
and `chromium-driver`, through selenium): it lists the models, translates a sentence, and shows
the server's answer. Skipped, with the install line, where the browser is missing."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys

import httpx
import pytest
from served_artifacts import Served, free_port, wait_ready

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait
except ImportError:  # pragma: no cover - the dev extra installs it
    webdriver = None

pytestmark = pytest.mark.skipif(
    CHROMIUM is None or DRIVER is None or webdriver is None,
    reason="a headless browser is needed: apt-get install -y chromium chromium-driver "
    "(make setup does as root) and pip install selenium",
)


def test_the_page_translates_a_sentence_with_the_servers_answer(arts: Served) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    args = [sys.executable, "-m", "seqc.cli", "serve", str(arts.artifact("mt")), "--name", "mt"]
    proc = subprocess.Popen(
        [*args, "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    driver = None
    try:
        wait_ready(proc, url)
        want = httpx.post(f"{url}/v1/models/mt/translate", json={"text": ["abcdef"]}).json()

        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
            options.add_argument(flag)
        driver = webdriver.Chrome(service=Service(executable_path=DRIVER), options=options)
        driver.set_page_load_timeout(30)
        driver.get(url + "/")
        wait = WebDriverWait(driver, 30)
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#model option"))
        assert (
            Select(driver.find_element(By.ID, "model")).first_selected_option.get_attribute("value")
            == "mt"
        )
        text = driver.find_element(By.ID, "text")
        text.clear()
        text.send_keys("abcdef")
        driver.find_element(By.ID, "go").click()
        shown = wait.until(
            lambda d: d.find_element(By.ID, "latency").text and d.find_element(By.ID, "output").text
        )
        wait.until(lambda d: d.find_element(By.ID, "output").text == want["translations"][0])
        assert shown and driver.find_element(By.ID, "latency").text.endswith(" ms")
    finally:
        if driver is not None:
            driver.quit()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
