#!/usr/bin/env python3
"""The owner's side in a real browser: headless Chromium from Debian, driven by Selenium pointed at
the system's chromedriver (nothing is downloaded), against the real guidance-server, with the
real dashcam-agent pairing itself.

    python3 Tests/Browser/owner_pages.py --bin .build/debug --out .build/browser

The flow, as an owner lives it: set a password from the operator's one-time link, sign in, type
the code the car said (read from the car's log, in lower case with spaces), see the car named
on the approval page, approve, see the car with its remaining usage, buy usage through the
simulated provider (Pay), see the new total, keep the last seconds with `protect` and watch the
clip that went up by itself play on its event page (seek, download, share, delete), read the pages
in Korean and Japanese with local times, see the drive (the car's GPS from Debian's gpsd, fed NMEA)
drawn on its trip page, unpair, and hear the car offer a new code. Each page is checked for labels
on every input and headings in order, by axe-core (no serious or critical violation), and shot at
a phone's width (390 px) and a desktop's (1280 px) into --out. At the end the server's log is
searched for every secret of the flow.
"""
import argparse
import hashlib
import json
import math
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.error
import threading
import urllib.request

from selenium import webdriver
from selenium_axe_python import Axe
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

FAILURES = []
TEXT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../Sources/GuidanceServer/Owners/Pages/text")


def phrase(language, english):
    """What the pages say for `english` in `language`, from the server's own catalog."""
    if language == "en":
        return english
    with open(os.path.join(TEXT, language + ".json"), encoding="utf-8") as file:
        return json.load(file)[english]


def check(condition, what):
    print(("ok    " if condition else "FAIL  ") + what, flush=True)
    if not condition:
        FAILURES.append(what)


def wait_for(what, predicate, limit=90):
    """Waits for `predicate` (the event itself); `limit` only bounds a failure."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise SystemExit(f"FAIL  {what}: not within {limit} s")


def gone(element):
    """The element left the document: the page it was on has been replaced. Chromium reports an
    element of a page being torn down either as stale or, in the instant between, as a node that
    "does not belong to the document": both mean gone."""
    def predicate(_driver):
        try:
            element.is_enabled()
            return False
        except StaleElementReferenceException:
            return True
        except WebDriverException as error:
            if "does not belong to the document" in str(error):
                return True
            raise
    return predicate


def submit(driver, selector):
    """Clicks a form's button and waits for the page it leads to (the old one goes stale)."""
    old = driver.find_element(By.TAG_NAME, "html")
    driver.find_element(By.CSS_SELECTOR, selector).click()
    WebDriverWait(driver, 90).until(gone(old))


def read(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as file:
            return file.read()
    except FileNotFoundError:
        return ""


def accessible(driver, page, out):
    """Labels on every input a person fills, headings in order, a screenshot at 390 px."""
    problems = driver.execute_script("""
        const problems = [];
        for (const input of document.querySelectorAll('input:not([type=hidden]), select, textarea')) {
            const labelled = (input.id && document.querySelector('label[for="' + input.id + '"]'))
                || input.closest('label') || input.getAttribute('aria-label');
            if (!labelled) problems.push('no label: ' + (input.name || input.outerHTML.slice(0, 60)));
        }
        let last = 0;
        const headings = [...document.querySelectorAll('h1, h2, h3, h4, h5, h6')];
        if (headings.length === 0 || headings[0].tagName !== 'H1') problems.push('the first heading is not h1');
        for (const heading of headings) {
            const level = Number(heading.tagName[1]);
            if (level > last + 1) problems.push('heading ' + heading.tagName + ' after h' + last);
            last = level;
        }
        if (document.documentElement.lang === '') problems.push('no lang on html');
        if (document.documentElement.scrollWidth > window.innerWidth + 1) problems.push('wider than the screen');
        return problems;""")
    check(not problems, f"{page}: accessible at 390 px {problems if problems else ''}")
    driver.save_screenshot(os.path.join(out, f"{page}.png"))
    # axe-core (Deque's rules, WCAG 2.1 A and AA and best practices), run in the page.
    axe = Axe(driver)
    axe.inject()
    results = axe.run()
    with open(os.path.join(out, f"axe-{page}.json"), "w") as file:
        json.dump({"url": results.get("url"), "violations": results["violations"]}, file, indent=1)
    grave = [f"{v['id']} ({v['impact']}, {len(v['nodes'])}x)" for v in results["violations"] if v.get("impact") in ("serious", "critical")]
    check(not grave, f"{page}: axe-core finds no serious or critical violation {grave if grave else ''}")
    driver.set_window_size(1280, 900)
    driver.save_screenshot(os.path.join(out, f"{page}-1280.png"))
    driver.set_window_size(390, 844)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", default=".build/debug")
    parser.add_argument("--out", default=".build/browser")
    args = parser.parse_args()
    binaries = os.path.abspath(args.bin)
    out = os.path.abspath(args.out)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    folder = tempfile.mkdtemp(prefix="owner-pages-")
    processes = []
    try:
        run(binaries, out, folder, processes)
    finally:
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
                process.wait()
        for name in ("server.log", "agent.log"):
            if os.path.exists(os.path.join(folder, name)):
                shutil.copy(os.path.join(folder, name), out)
        shutil.rmtree(folder, ignore_errors=True)
    if FAILURES:
        print(f"{len(FAILURES)} check(s) failed", file=sys.stderr)
        sys.exit(1)
    print("all checks passed; screenshots in " + out)


def driver_options(language="en-US"):
    options = webdriver.ChromeOptions()
    options.add_argument("--lang=" + language)
    options.add_experimental_option("prefs", {"intl.accept_languages": language})
    options.binary_location = "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=390,844",
                 "--autoplay-policy=no-user-gesture-required"):
        options.add_argument(flag)
    return options


def run(binaries, out, folder, processes):
    path = lambda name: os.path.join(folder, name)  # noqa: E731
    with open(path("tokens.yaml"), "w") as file:
        file.write("other-token: car-9\n")
    os.chmod(path("tokens.yaml"), 0o600)
    with open(path("script.yaml"), "w") as file:
        file.write('- text: "Pedestrian ahead, slow down."\n  lang: en-US\n- clear: true\n')
    with open(path("server.yaml"), "w") as file:
        file.write(f"""server:
  host: 127.0.0.1
  port: 0
  tokensFile: {path("tokens.yaml")}
analyzer:
  kind: scripted
  scriptFile: {path("script.yaml")}
usage:
  remainingSeconds: 600
pairing:
  enabled: true
  signingKeyFile: {path("signing.key")}
payments:
  provider: simulated
  products: ["1 hour=3600=4.99 EUR"]
  webhookSecretFile: {path("webhook.secret")}
clips:
  dir: {path("clips")}
ledger: sqlite:{path("usage.sqlite")}
""")
    server_log = open(path("server.log"), "w")
    server = subprocess.Popen([os.path.join(binaries, "guidance-server"), "--config", path("server.yaml")],
                              stdout=server_log, stderr=subprocess.STDOUT, cwd=folder)
    processes.append(server)
    line = wait_for("server listening", lambda: re.search(r"listening on 127\.0\.0\.1:(\d+)", read(path("server.log"))))
    port = int(line.group(1))
    base = f"http://127.0.0.1:{port}"

    # The operator makes the account; the link is printed once.
    made = subprocess.run([os.path.join(binaries, "guidance-server"), "owner", "add", "ana@example.org", "--name", "Ana",
                           "--config", path("server.yaml")], capture_output=True, text=True, cwd=folder, check=True)
    link = made.stdout.strip().replace("http://127.0.0.1:0", base)
    check(link.startswith(base + "/set-password?token="), "owner add prints a one-time link")

    # The car: no token file, no credentials: it pairs. Its GPS is gpsd's.
    gpsd = Gpsd(folder, processes)
    with open(path("agent.yaml"), "w") as file:
        file.write(f"""camera:
  source: test-pattern
  width: 320
  height: 180
  fps: 10
  pace: realtime
encoder:
  preference: [libx264]
  segmentSeconds: 2
recording:
  dir: {path("segments")}
uplink:
  video:
    width: 320
    height: 180
  url: ws://127.0.0.1:{port}/v1/stream
  allowInsecure: true
  tokenFile: {path("token")}
  credentialsFile: {path("credentials.json")}
  deviceId: Ana's van
device:
  locale: en-US
speech:
  sink: wav:{path("speech")}
haptics:
  required: false
sensors:
  gps:
    gpsd: 127.0.0.1:{gpsd.port}
status:
  socket: {path("status.sock")}
""")
    agent_log = open(path("agent.log"), "w")
    agent = subprocess.Popen([os.path.join(binaries, "dashcam-agent"), "record", "--config", path("agent.yaml")],
                             stdout=agent_log, stderr=subprocess.STDOUT, cwd=folder)
    processes.append(agent)
    spoken = wait_for("the car says a code", lambda: re.findall(r"pairing: enter the code (\d{3} \d{3} \d{3})", read(path("agent.log"))))
    code = spoken[0]

    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=driver_options())
    secrets = {"user code": code.replace(" ", ""), "password": "correct horse battery"}
    try:
        driver.set_window_size(390, 844)
        # A password from the link.
        driver.get(link)
        accessible(driver, "set-password", out)
        driver.find_element(By.ID, "password").send_keys(secrets["password"])
        driver.find_element(By.ID, "again").send_keys(secrets["password"])
        submit(driver, "button[type=submit]")
        check("Your password is set" in driver.page_source, "the password is set")
        # The link is spent.
        driver.get(link)
        driver.find_element(By.ID, "password").send_keys("another password")
        driver.find_element(By.ID, "again").send_keys("another password")
        submit(driver, "button[type=submit]")
        check("used or has expired" in driver.page_source, "a password link works once")

        # Sign in, with a wrong password first.
        driver.get(base + "/signin")
        accessible(driver, "signin", out)
        driver.find_element(By.ID, "email").send_keys("ana@example.org")
        driver.find_element(By.ID, "password").send_keys("wrong password!")
        submit(driver, "button[type=submit]")
        check("do not match" in driver.page_source, "a wrong password is refused")
        driver.find_element(By.ID, "password").send_keys(secrets["password"])
        submit(driver, "main button[type=submit]")
        check(driver.find_element(By.TAG_NAME, "h1").text == "My cars", "signed in, on My cars")
        session = next((c for c in driver.get_cookies() if c["name"] == "session"), None)
        check(session is not None and session.get("httpOnly") and session.get("sameSite") == "Strict",
              f"the session cookie is HttpOnly and SameSite=Strict ({session and {k: session.get(k) for k in ('httpOnly', 'sameSite')}})")
        check(driver.execute_script("return document.cookie") == "", "no cookie is readable by a script")
        secrets["session cookie"] = session["value"] if session else ""
        secrets["csrf"] = driver.find_element(By.NAME, "csrf").get_attribute("value")
        accessible(driver, "devices-empty", out)

        # A form without the session's CSRF value is refused.
        request = urllib.request.Request(base + "/pair", data=b"csrf=forged&code=" + code.replace(" ", "").encode(), method="POST",
                                         headers={"Content-Type": "application/x-www-form-urlencoded", "Cookie": "session=" + secrets["session cookie"]})
        try:
            forged = urllib.request.urlopen(request).status
        except urllib.error.HTTPError as error:
            forged = error.code
        check(forged == 403, f"a form with a forged CSRF value is refused ({forged})")

        # Pair: the code typed in lower case with spaces, as heard.
        driver.get(base + "/pair")
        accessible(driver, "pair", out)
        driver.find_element(By.ID, "code").send_keys(" " + code.lower() + " ")
        submit(driver, "main button[type=submit]")
        check(driver.find_element(By.CSS_SELECTOR, ".device-name").text == "Ana's van", "the approval page names the car (RFC 8628 §5.4)")
        accessible(driver, "approve", out)
        submit(driver, "button[value=approve]")
        wait_for("the car says whose account", lambda: "Paired with the account of Ana." in read(path("agent.log")))
        credentials = json.loads(wait_for("credentials stored", lambda: read(path("credentials.json"))))
        check(os.stat(path("credentials.json")).st_mode & 0o777 == 0o600, "the car's credentials are mode 0600")
        secrets["refresh token"] = credentials["refreshToken"]
        secrets["access token"] = credentials["accessToken"]
        device = credentials["deviceId"]
        wait_for("the car streams", lambda: "Connected to guidance." in read(path("agent.log")))

        driver.get(base + "/")
        text = driver.find_element(By.CSS_SELECTOR, ".car").text
        check("Ana's van" in text and "Remaining usage" in text, "My cars lists the car")
        before = driver.find_element(By.CSS_SELECTOR, ".remaining").text
        check(before.endswith("min") or before.endswith(" s"), f"its remaining usage is shown ({before})")
        wait_for("guidance on the page", lambda: (driver.get(base + "/") or "Pedestrian ahead" in driver.page_source))
        accessible(driver, "devices", out)

        # A new name.
        label = driver.find_element(By.CSS_SELECTOR, "input[name=label]")
        label.clear()
        label.send_keys("Family car")
        submit(driver, "form[action$='/rename'] button")
        check(driver.find_element(By.CSS_SELECTOR, ".car h2").text == "Family car", "the car is renamed")

        # Buy an hour: the provider's page, Pay, back to My cars with the new total.
        submit(driver, "a.buy")
        accessible(driver, "buy", out)
        submit(driver, "main button[type=submit]")
        check("simulated payment provider" in driver.page_source, "the provider's checkout page")
        accessible(driver, "checkout", out)
        submit(driver, "button[value=pay]")
        after = driver.find_element(By.CSS_SELECTOR, ".remaining").text
        check(after.startswith("1 h "), f"the hour bought is in the total ({before} -> {after})")
        ledger = sqlite3.connect(path("usage.sqlite"))
        credits = ledger.execute("SELECT count(*), sum(seconds) FROM credits WHERE device = ?", (device,)).fetchone()
        check(credits == (1, 3600), f"one credit of 3600 s in the ledger ({credits})")
        secrets["password hash"] = ledger.execute("SELECT password_hash FROM owners").fetchone()[0]
        ledger.close()

        events(driver, base, binaries, path, out, secrets)

        # The sessions page lists this browser's session, marked as such.
        driver.get(base + "/sessions")
        check("(this browser)" in driver.page_source and len(driver.find_elements(By.CSS_SELECTOR, "li.session")) == 1,
              "the sessions page lists this browser's session")
        accessible(driver, "sessions", out)

        # Unpair: the stream is closed, the car forgets its credentials and offers a new code.
        driver.get(base + "/")
        submit(driver, "button.danger")
        check("was unpaired" in driver.page_source, "the car is unpaired")
        accessible(driver, "unpaired", out)
        wait_for("the car forgets its credentials", lambda: not os.path.exists(path("credentials.json")))
        again = wait_for("the car offers a new code", lambda: re.findall(r"pairing: enter the code (\d{3} \d{3} \d{3})", read(path("agent.log")))[1:])
        secrets["second user code"] = again[0].replace(" ", "")
        submit(driver, "nav button[type=submit]")
        check(driver.find_element(By.TAG_NAME, "h1").text == "Sign in", "signed out")
    finally:
        driver.quit()

    agent.send_signal(signal.SIGTERM)
    check(agent.wait(timeout=60) == 0, "the car stops cleanly")
    server.send_signal(signal.SIGTERM)
    check(server.wait(timeout=60) == 0, "the server stops cleanly")
    log = read(path("server.log"))
    secrets["signing key"] = read(path("signing.key")).strip()
    secrets["webhook secret"] = read(path("webhook.secret")).strip()
    for name, value in secrets.items():
        check(bool(value) and value not in log, f"the server's log does not show the {name}")
    check("Bearer" not in log and "Authorization" not in log, "the server's log shows no Authorization header")


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Gpsd:
    """Debian's gpsd on loopback, fed NMEA over UDP once a second as a receiver would: a car
    driving at 54 km/h (29.2 knots) on a wide curve from north to east (about 15 m a second)."""

    def __init__(self, folder, processes):
        self.port, self.feed_port = free_port(), free_port()
        processes.append(subprocess.Popen(["/usr/sbin/gpsd", "-N", "-n", "-S", str(self.port), "-F", os.path.join(folder, "gpsd.sock"),
                                           f"udp://127.0.0.1:{self.feed_port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        self.stopped = threading.Event()
        threading.Thread(target=self.feed, daemon=True).start()

    @staticmethod
    def sentences(lat, lon, now):
        stamp = time.gmtime(now)
        clock, date = time.strftime("%H%M%S.00", stamp), time.strftime("%d%m%y", stamp)

        def angle(value, digits):
            degrees = int(abs(value))
            return f"{degrees:0{digits}d}{(abs(value) - degrees) * 60:07.4f}"
        where = f"{angle(lat, 2)},{'N' if lat >= 0 else 'S'},{angle(lon, 3)},{'E' if lon >= 0 else 'W'}"
        bodies = [f"GPRMC,{clock},A,{where},29.2,45.0,{date},,,A", f"GPGGA,{clock},{where},1,08,0.9,35.0,M,18.0,M,,",
                  "GPGSA,A,3,01,02,03,04,05,06,07,08,,,,,1.5,0.9,1.2"]
        out = []
        for body in bodies:
            checksum = 0
            for byte in body.encode():
                checksum ^= byte
            out.append(f"${body}*{checksum:02X}\r\n".encode())
        return out

    def feed(self):
        lat, lon, heading = 37.5665, 126.978, 0.0
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
            while not self.stopped.wait(1):
                heading = min(heading + 0.02, 1.5)
                lat, lon = lat + 0.000135 * math.cos(heading), lon + 0.00017 * math.sin(heading)
                for sentence in self.sentences(lat, lon, time.time()):
                    sender.sendto(sentence, ("127.0.0.1", self.feed_port))


class NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def fetch(url, cookie, headers=None):
    """A GET with the owner's session cookie (or none), redirects not followed: status, headers, body."""
    request = urllib.request.Request(url, headers=dict(headers or {}, **({"Cookie": "session=" + cookie} if cookie else {})))
    try:
        with urllib.request.build_opener(NoRedirects).open(request) as answer:
            return answer.status, dict(answer.headers), answer.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def events(driver, base, binaries, path, out, secrets):
    """The driver keeps the last seconds; the clip goes up by itself, lists on Events, plays on its
    page, answers a seek with 206, downloads as the car's own bytes, and is deleted."""
    kept = subprocess.run([os.path.join(binaries, "dashcam-agent"), "protect", "--last", "6s", "--socket", path("status.sock"), "--json"],
                          capture_output=True, text=True)
    check(kept.returncode == 0, f"protect keeps the last seconds ({kept.stdout.strip()[:200]} {kept.stderr.strip()[:200]})")
    wait_for("the clip is stored on the server", lambda: re.search(r"uplink: clip (protect-\S+) is stored on the server", read(path("agent.log"))),
             limit=240)
    driver.get(base + "/events")
    check("Times are shown in UTC" in driver.page_source, "Events asks once for the owner's time zone")
    # The owner's time zone and language: the pages in Korean, times in Seoul written the Korean way.
    settings(driver, base, out, "Asia/Seoul", "ko")
    check(phrase("ko", "Saved.") in driver.page_source and language_of(driver) == "ko",
          "the settings are saved, and the page that says so is already in Korean")
    driver.get(base + "/events")
    entry = driver.find_element(By.CSS_SELECTOR, ".event")
    check(driver.find_element(By.TAG_NAME, "h1").text == phrase("ko", "Events") and phrase("ko", "Saved by hand") in entry.text
          and phrase("ko", "whole") in entry.text, f"Events lists the clip, in Korean ({entry.text!r})")
    check("년" in entry.text and "GMT+9" in entry.text and not driver.find_elements(By.CSS_SELECTOR, "p.notice a[href='/settings']"),
          f"its time is Seoul's, written in Korean ({entry.text!r})")
    accessible(driver, "events", out)
    submit(driver, ".event a")
    accessible(driver, "event", out)
    video = driver.find_element(By.TAG_NAME, "video")
    wait_for("the video has data to play", lambda: driver.execute_script("return arguments[0].readyState", video) >= 2)
    driver.execute_script("arguments[0].muted = true; arguments[0].play();", video)
    wait_for("the video plays", lambda: driver.execute_script("return arguments[0].currentTime", video) > 0.2)
    check(True, "the event page plays the clip (readyState >= 2, currentTime advances)")
    driver.set_window_size(1280, 900)
    driver.save_screenshot(os.path.join(out, "event-1280.png"))
    driver.set_window_size(390, 844)
    cookie = secrets["session cookie"]
    url = video.get_attribute("src")
    status, headers, body = fetch(url, cookie, {"Range": "bytes=100-199"})
    check(status == 206 and len(body) == 100 and headers.get("Content-Range", "").startswith("bytes 100-199/"),
          f"a seek is answered 206 with the bytes asked ({status}, {headers.get('Content-Range')})")
    status, headers, whole = fetch(url + "?download=1", cookie)
    name = url.rsplit("/", 1)[1]
    car_files = [os.path.join(root, file) for root, _, files in os.walk(path("segments")) for file in files if file == name]
    car = open(car_files[0], "rb").read() if car_files else b""
    check(status == 200 and "attachment" in headers.get("Content-Disposition", "") and whole and
          hashlib.sha256(whole).hexdigest() == hashlib.sha256(car).hexdigest(), f"the download is the car's file, byte for byte ({status}, {len(whole)} bytes)")
    status, _, _ = fetch(url, None)
    check(status in (303, 302), f"signed out, the file is not served ({status})")
    status, _, _ = fetch(base + "/events/car-9/" + url.split("/")[-3] + "/files/" + name, cookie)
    check(status == 404, f"a car that is not the owner's has no events ({status})")
    # A link for the insurer: it works signed out (a browser without the owner's cookie plays the
    # video), and not once revoked.
    submit(driver, "form[action$='/share'] button")
    link = driver.find_element(By.CSS_SELECTOR, ".share-link").get_attribute("value")
    check("/shared/" in link, f"a share link is made ({link[:60]}...)")
    # The insurer's browser asks for Japanese (Accept-Language): the shared page is in Japanese.
    stranger = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=driver_options("ja"))
    try:
        stranger.set_window_size(390, 844)
        stranger.get(link)
        check(language_of(stranger) == "ja" and phrase("ja", "When") in stranger.page_source,
              "the shared page is in the language the viewer's browser asks for (Japanese)")
        accessible(stranger, "shared", out)
        shared_video = stranger.find_element(By.TAG_NAME, "video")
        wait_for("the shared video has data to play", lambda: stranger.execute_script("return arguments[0].readyState", shared_video) >= 2)
        check("Sign out" not in stranger.page_source and "Family car" not in stranger.page_source,
              "the shared page plays the clip in a browser that never signed in, and shows nothing of the owner's")
        stranger.set_window_size(1280, 900)
        stranger.save_screenshot(os.path.join(out, "shared-1280.png"))
    finally:
        stranger.quit()
    submit(driver, "form[action$='/revoke'] button")
    status, _, _ = fetch(link, None)
    check(phrase("ko", "That link no longer works.") in driver.page_source and status == 404, f"a revoked link stops working ({status})")
    submit(driver, "form[action$='/delete'] button")
    check(phrase("ko", "The event and its video were deleted.") in driver.page_source and not driver.find_elements(By.CSS_SELECTOR, ".event"),
          "the event is deleted")
    status, _, _ = fetch(url, cookie)
    check(status == 404, f"a deleted clip is gone ({status})")
    trips(driver, base, out)
    # Back to the browser's language (English) for what follows.
    settings(driver, base, None, "Asia/Tokyo", "")


def language_of(driver):
    return driver.find_element(By.TAG_NAME, "html").get_attribute("lang")


def settings(driver, base, out, zone, language):
    from selenium.webdriver.support.ui import Select
    driver.get(base + "/settings")
    if out:
        accessible(driver, "settings", out)
    Select(driver.find_element(By.ID, "timeZone")).select_by_value(zone)
    Select(driver.find_element(By.ID, "language")).select_by_value(language)
    submit(driver, "main button[type=submit]")


def trips(driver, base, out):
    """The car has driven since it paired (gpsd's fixes on every segment): in Japanese, with
    times in Tokyo, the drive is listed and its track drawn."""
    settings(driver, base, None, "Asia/Tokyo", "ja")
    check(phrase("ja", "Saved.") in driver.page_source and language_of(driver) == "ja", "the pages are in Japanese now")
    wait_for("a trip is listed", lambda: driver.get(base + "/trips") or driver.find_elements(By.CSS_SELECTOR, ".trip"))
    entry = driver.find_element(By.CSS_SELECTOR, ".trip")
    check(driver.find_element(By.TAG_NAME, "h1").text == phrase("ja", "Trips") and "年" in entry.text and "km" in entry.text,
          f"Trips lists the drive, in Japanese with the date written the Japanese way ({entry.text!r})")
    accessible(driver, "trips", out)
    submit(driver, ".trip a")
    points = driver.find_element(By.CSS_SELECTOR, "svg polyline").get_attribute("points").split()
    facts = {dt.text: dd.text for dt, dd in zip(driver.find_elements(By.CSS_SELECTOR, "dt"), driver.find_elements(By.CSS_SELECTOR, "dd"))}
    distance = float(re.sub(r"[^0-9.]", "", facts.get(phrase("ja", "Distance"), "")) or 0)
    speed = re.sub(r"[^0-9]", "", facts.get(phrase("ja", "Top speed"), ""))
    check(len(points) >= 2 and distance > 0 and speed == "54",
          f"the trip's page draws its track ({len(points)} points) with its distance ({distance} km) and top speed ({speed} km/h)")
    check(not driver.find_elements(By.CSS_SELECTOR, "img, iframe, [src^='http']"), "the track is drawn from the points alone: no outside tiles")
    accessible(driver, "trip", out)


if __name__ == "__main__":
    main()
