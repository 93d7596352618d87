#!/usr/bin/env python3
"""The observer page in a real browser (Debian's chromium, headless, driven
by python3-selenium through chromium-driver).

Starts smarm-server, loads /observer from its admin listener and checks,
each within a bounded wait: rows for the kv server, the workers and the
listener; sorting by mailbox depth; the kv server's detail; the tree with
the `services` supervisor; stopping a worker through the page (confirm
accepted) raises the restart counts; a trace taken from the page is
offered as a download. Saves a screenshot (the test
artifact; --screenshot also writes it where the README takes it from).
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

WAIT = 20  # seconds, per step


def start_server(exe, config, log):
    out = open(log, "w")
    p = subprocess.Popen([exe, "--config", config, "--http.host=127.0.0.1", "--http.port=0",
                          "--admin.port=0"], stdout=out, stderr=subprocess.STDOUT)
    deadline = time.time() + 20
    while time.time() < deadline:
        text = open(log).read()
        m = re.search(r"admin listener on 127\.0\.0\.1:(\d+)", text)
        h = re.search(r"listening on 127\.0\.0\.1:(\d+)", text)
        if m and h:
            return p, int(h.group(1)), int(m.group(1))
        if p.poll() is not None:
            break
        time.sleep(0.1)
    p.kill()
    sys.exit("smarm-server did not start:\n" + open(log).read())


def browser():
    o = Options()
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--window-size=1500,1000", "--no-first-run", "--disable-extensions"):
        o.add_argument(a)
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=o)


def until(d, what, fn):
    def safe(_):
        try:
            return fn()
        except StaleElementReferenceException:  # the table is rebuilt each refresh
            return False
    try:
        return WebDriverWait(d, WAIT, poll_frequency=0.1).until(safe)
    except Exception:
        raise AssertionError("timed out waiting for: " + what)


def rows(d):
    # One script call: the table is rebuilt at each refresh, so element
    # handles read one by one may go stale in between.
    return d.execute_script("""
        return [...document.querySelectorAll('#actors tbody tr')].map((tr) => ({
            pid: tr.dataset.pid, name: tr.querySelector('.c-name').textContent,
            mailbox: tr.querySelector('.c-mailbox').textContent}));""")


def row_named(d, pattern):
    for r in rows(d):
        if re.search(pattern, r["name"]):
            return r
    return None


def click_row(d, pid):
    until(d, "row " + pid, lambda: d.find_element(
        By.CSS_SELECTOR, '#actors tbody tr[data-pid="%s"]' % pid).click() or True)


def services_restarts(d):
    return d.execute_script("""
        const li = document.querySelector('#tree li.supervisor[data-id="services"]');
        const b = li && li.querySelector(':scope > .restarts');
        return b ? +b.dataset.restarts : null;""")


def child_restarts(d, child_id):
    return d.execute_script("""
        for (const li of document.querySelectorAll('#tree li')) {
            const n = li.querySelector(':scope > .node');
            if (n && n.textContent.trim() === arguments[0])
                return +li.querySelector(':scope > .child-restarts').dataset.restarts;
        }
        return null;""", child_id)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("server")
    ap.add_argument("config")
    ap.add_argument("--artifact", default="observer.png", help="the screenshot (test artifact)")
    ap.add_argument("--screenshot", help="also write the screenshot here (docs/observer.png)")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="smarm-observer-")
    proc, port, admin = start_server(args.server, args.config, os.path.join(tmp, "server.log"))
    load = None
    d = None
    try:
        # Some traffic, so the charts and the CPU column have something.
        load = subprocess.Popen(["sh", "-c", "while :; do for i in 1 2 3 4 5 6 7 8; do "
                                 "printf 'v%s' $i | curl -s -o /dev/null -X PUT --data-binary @- "
                                 "http://127.0.0.1:" + str(port) + "/kv/k$i; done; sleep 0.05; done"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        d = browser()
        d.get("http://127.0.0.1:%d/observer" % admin)
        assert "smarm observer" in d.title, d.title

        # Rows for the kv server, the workers and the listener.
        kv = until(d, "a kv row", lambda: row_named(d, r"^kv\b"))
        until(d, "worker rows", lambda: row_named(d, r"worker-0") and row_named(d, r"worker-1"))
        until(d, "the workers group", lambda: row_named(d, r"\[workers\]"))
        until(d, "the http listener row", lambda: row_named(d, r"^http$"))
        until(d, "the header's live actors", lambda: "/" in d.find_element(By.ID, "h-live").text)
        until(d, "a scheduler chart", lambda: d.find_elements(By.CSS_SELECTOR, "#scheds canvas"))

        # Sort by mailbox depth: the column is non-increasing (blank = no inbox).
        d.find_element(By.CSS_SELECTOR, 'th[data-sort="mailbox"]').click()
        def sorted_by_mailbox():
            th = d.find_element(By.CSS_SELECTOR, 'th[data-sort="mailbox"]')
            if "sorted" not in th.get_attribute("class"):
                return False
            vals = [int(r["mailbox"]) if r["mailbox"] else -1 for r in rows(d)]
            return vals and vals == sorted(vals, reverse=True) and vals[0] >= 0
        until(d, "the table sorted by mailbox depth", sorted_by_mailbox)

        # The kv server's detail.
        click_row(d, kv["pid"])
        until(d, "the kv detail", lambda: d.find_element(By.ID, "detail-list")
              .get_attribute("data-pid") == kv["pid"])
        names = d.find_element(By.CSS_SELECTOR, '#detail-list dd[data-k="names"]').text
        assert names == "kv", names
        assert d.find_element(By.CSS_SELECTOR, '#detail-list dd[data-k="mailbox"]').text != ""

        # The tree, with the services supervisor and its restart count.
        before = until(d, "the services supervisor in the tree",
                       lambda: services_restarts(d) is not None and (services_restarts(d),))[0]

        # Stop a worker through the page; the supervisor restarts it.
        worker = row_named(d, r"worker-0")
        click_row(d, worker["pid"])
        until(d, "the worker detail", lambda: d.find_element(By.ID, "detail-list")
              .get_attribute("data-pid") == worker["pid"])
        d.find_element(By.ID, "stop").click()
        alert = until(d, "the confirm dialog", lambda: d.switch_to.alert)
        assert "Stop actor " + worker["pid"] in alert.text, alert.text
        alert.accept()
        until(d, "the stop accepted", lambda: d.find_element(By.ID, "result").text.startswith("202"))
        until(d, "the services restart count rising",
              lambda: (services_restarts(d) or 0) > before)
        until(d, "worker-0 restarted with a new pid", lambda: (row_named(d, r"worker-0") or {})
              .get("pid") not in (None, worker["pid"]))
        assert (child_restarts(d, "worker-0") or 0) >= 1, child_restarts(d, "worker-0")
        until(d, "the last exit in the tree", lambda: "last exit: stopped" in
              d.find_element(By.ID, "tree").text)

        # Take a trace from the page: a 5 s recording, offered as a download.
        d.find_element(By.ID, "trace").click()
        until(d, "the trace's download link", lambda: d.execute_script("""
            const a = document.querySelector('#result a[download="smarm-trace.json"]');
            return a && a.href.startsWith('blob:') && /trace recorded/.test(
                document.getElementById('result').textContent);"""))

        # The screenshot: the kv server selected, the table by CPU.
        d.find_element(By.CSS_SELECTOR, 'th[data-sort="cpu"]').click()
        click_row(d, kv["pid"])
        time.sleep(2.5)  # two refreshes: the charts draw a little history
        d.save_screenshot(args.artifact)
        if args.screenshot:
            d.save_screenshot(args.screenshot)
        # Expected: no favicon, and the stopped worker's detail is a 404
        # (the page says it is no longer live).
        gone = "/debug/actor/" + worker["pid"].replace("<", "%3C").replace(">", "%3E")
        errors = [e for e in d.get_log("browser")
                  if e["level"] == "SEVERE" and "favicon.ico" not in e["message"]
                  and not (gone in e["message"] and "404" in e["message"])]
        assert not errors, errors
        print("observer browser test passed; screenshot", args.artifact)
    finally:
        if d:
            d.quit()
        if load:
            load.kill()
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


if __name__ == "__main__":
    main()
