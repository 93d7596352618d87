#!/usr/bin/env python3
"""Soak (issue 27): the kv 90/10 scenario at 80% of the measured peak for a
long time, with group commit; memory and fds stay flat, nothing fails, and
every acknowledged write survives a kill -9 at the end.

1. Peak: smarm-load closed loop (16 connections, kv-90-10) for a few
   seconds after a warm-up.
2. Soak: smarm-load open loop at 80% of that rate for --duration, plus a
   writer of its own (PUTs of versioned values over 500 keys, one at a
   time, each answer recorded). RSS and the fd count of the server are
   sampled every --interval seconds.
3. Checks: zero smarm-load errors and only 200/201/204/404; zero writer
   failures; after the warm-up (the first 20% of the run, at least 20 s)
   the largest RSS sample is within 5% of the smallest and the fd count
   does not grow. Then the writer stops, smarm-server is killed (-9) under
   the load, restarted, and every key must hold its last acknowledged value.

make soak DURATION=1h runs it for an hour; ctest runs it for 60 s. The
samples are printed (and written to --samples as CSV when given).

When smarm-load reports errors, the test prints what tells their cause:
smarm-load's per-second lines from just before the first error, the server's
warnings (a slow kv sync names itself), and the machine's own stops. A
machine that stops running processes for seconds (a VM descheduled by its
host; steal time) makes every request of that time time out, the server's
fault or not. The test watches for that with a thread of its own that
sleeps 50 ms at a time: if it overslept by 2 s or more around the first
error, the machine stopped, and the soak phase runs once more (the second
run must pass as is). A server that stalls on its own leaves the watcher
on time and fails the test.

Usage: soak_test.py SMARM_SERVER CONFIG SMARM_LOAD [--duration 60s]
       [--interval 10] [--samples FILE]
"""
import argparse
import http.client
import os
import re
import shutil
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rel  # noqa: E402

KV = ["-c", "16", *rel.scenario("kv-90-10.yaml")]
FLAT = 0.05


def seconds_of(text):
    units = {"s": 1, "m": 60, "h": 3600}
    t = text.strip()
    if t and t[-1] in units:
        return float(t[:-1]) * units[t[-1]]
    return float(t)


class Writer(threading.Thread):
    """PUTs `soak-{i % 500}` with a fresh value each time; `acked` holds the
    last value each key was acknowledged with."""

    def __init__(self, port):
        super().__init__(daemon=True)
        self.port = port
        self.stop = threading.Event()
        self.acked = {}
        self.failures = []
        self.uncertain = None  # (key, value) of a PUT that failed: it may be stored
        self.count = 0

    def run(self):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        i = 0
        while not self.stop.is_set():
            key = f"soak-{i % 500}"
            value = f"{key}-v{i}"
            try:
                c.request("PUT", f"/kv/{key}", body=value)
                r = c.getresponse()
                body = r.read()
            except (OSError, http.client.HTTPException) as e:
                self.failures.append(f"PUT {key}: {e!r}")
                self.uncertain = (key, value)
                return
            if r.status in (201, 204):
                self.acked[key] = value
                self.count += 1
            else:
                self.failures.append(f"PUT {key}: {r.status} {body[:80]!r}")
                return
            i += 1
            time.sleep(0.005)
        c.close()


MACHINE_PAUSE = 2.0  # seconds the watcher overslept: the machine stopped


def first_error_second(progress):
    """The loader's time (s) at its first progress line with errors, or None."""
    for line in progress:
        m = re.match(r"\[\s*([\d.]+)s\].*errors (\d+)", line)
        if m and int(m.group(2)) > 0:
            return float(m.group(1))
    return None


def soak_phase(a, srv, rate, duration):
    """The open-loop run with the writer and the samples. Returns (report,
    samples, writer, machine pauses during it, steal seconds during it,
    the loader's start on the monotonic clock)."""
    watch = rel.PauseWatch()
    watch.start()
    steal0 = rel.steal_seconds()
    writer = Writer(srv.port)
    t0 = time.monotonic()
    load = rel.load(a.load, srv.port, "/", [*KV, "-R", f"{rate:.0f}"], duration, progress=True)
    writer.start()
    samples = []  # (t, rss KiB, fds)
    while load[0].poll() is None and (t := time.monotonic() - t0) <= duration:
        samples.append((t, srv.rss_kib(), srv.fds()))
        print(f"  t={t:6.0f}s rss={samples[-1][1]} KiB fds={samples[-1][2]}", flush=True)
        time.sleep(max(0.0, a.interval - (time.monotonic() - t0 - t)))
    r = rel.load_report(load, duration + 120)
    writer.stop.set()
    writer.join(30)
    watch.stop.set()
    watch.join()
    return r, samples, writer, watch.pauses, rel.steal_seconds() - steal0, t0


def explain_errors(r, srv, pauses, steal, t0):
    """Prints what tells the errors' cause; True when the machine itself
    stopped (a pause of MACHINE_PAUSE or more) within the seconds before
    the first error."""
    print(f"smarm-load errors {r['errors']}; what tells their cause:", flush=True)
    first = first_error_second(r["progress"])
    lines = r["progress"]
    at = next((i for i, line in enumerate(lines) if first is not None
               and line.startswith(f"[{first:5.1f}s]")), len(lines))
    for line in lines[max(0, at - 8):at + 4]:
        print(f"  smarm-load {line}", flush=True)
    for start, seconds in pauses:
        print(f"  the machine did not run this test for {seconds:.1f} s at "
              f"t={start - t0:.1f} s", flush=True)
    print(f"  steal time during the run: {steal:.1f} s", flush=True)
    for line in srv.text().splitlines():
        if "[warning]" in line or "[error]" in line:
            print(f"  server: {line}", flush=True)
    if first is None:
        return False
    # The loader's first error comes at most its timeout (5 s) plus a
    # progress second after what caused it.
    return any(seconds >= MACHINE_PAUSE and first - 7 <= start - t0 <= first
               for start, seconds in pauses)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("server")
    ap.add_argument("config")
    ap.add_argument("load")
    ap.add_argument("--duration", default="60s")
    ap.add_argument("--interval", type=float, default=10)
    ap.add_argument("--samples")
    a = ap.parse_args()
    duration = seconds_of(a.duration)
    rel.check(duration >= 30, f"--duration {a.duration}: at least 30s (a warm-up and samples)")
    warmup = max(20.0, 0.2 * duration)
    tmp = tempfile.mkdtemp(prefix="smarm-soak-")
    try:
        args = [f"--kv.log_path={tmp}/kv.log", "--kv.sync=group", "--runtime.schedulers=2"]
        srv = rel.start(a.server, a.config, args)
        rel.wait_kv(srv.port)

        peak_r = rel.load_report(rel.load(a.load, srv.port, "/", [*KV, "-w", "2s"], 5), 60)
        rel.check(peak_r["error_total"] == 0, f"peak run: errors {peak_r['errors']}")
        peak = peak_r["rate"]
        rate = 0.8 * peak
        print(f"peak {peak:.0f} req/s (closed loop, 16 connections); soak at {rate:.0f} req/s "
              f"for {duration:.0f} s, warm-up {warmup:.0f} s", flush=True)

        expected = {}  # key -> the values it may hold after the kill
        for attempt in (1, 2):
            r, samples, writer, pauses, steal, t0 = soak_phase(a, srv, rate, duration)
            expected.update((key, {value}) for key, value in writer.acked.items())
            if writer.uncertain:
                key, value = writer.uncertain
                expected[key] = expected.get(key, set()) | {value}
            if r["error_total"] == 0:
                break
            machine = explain_errors(r, srv, pauses, steal, t0)
            rel.check(machine and attempt == 1, f"soak: smarm-load errors {r['errors']}")
            print("the machine stopped before the first error (above): the soak runs again",
                  flush=True)
        if a.samples:
            with open(a.samples, "w") as f:
                f.write("t_s,rss_kib,fds\n")
                for t, rss, fds in samples:
                    f.write(f"{t:.1f},{rss},{fds}\n")

        rel.check_statuses("soak", r, {"200", "201", "204", "404"})
        rel.check(not writer.failures, f"soak writer: {writer.failures[:5]}")
        rel.check(writer.count > 0, "the soak writer wrote nothing")
        steady = [s for s in samples if s[0] >= warmup]
        rel.check(len(steady) >= 2, f"only {len(steady)} samples after the warm-up")
        lo = min(s[1] for s in steady)
        hi = max(s[1] for s in steady)
        growth = hi / lo - 1
        rel.check(growth <= FLAT, f"RSS after the warm-up grew {growth:.1%} ({lo} -> {hi} KiB; "
                  f"bound {FLAT:.0%})")
        fd0 = steady[0][2]
        fdmax = max(s[2] for s in steady)
        rel.check(fdmax <= fd0 + 2, f"fds grew after the warm-up: {fd0} -> {fdmax}")
        print(f"ok: {r['requests']} requests at {rate:.0f} req/s, statuses {r['statuses']}, "
              f"no error; writer {writer.count} acknowledged; RSS {lo}..{hi} KiB "
              f"({growth:.1%}) over {len(steady)} samples after warm-up; fds {fd0}..{fdmax}",
              flush=True)

        # kill -9 under load, then every acknowledged write must be there.
        tail = rel.load(a.load, srv.port, "/", KV, 30)
        time.sleep(1)
        srv.kill()
        tail[0].kill()
        tail[0].wait()
        os.unlink(tail[1])
        rel.restart_and_check_kv(a.server, a.config, args,
                                 expected,
                                 "after kill -9 (acknowledged writes lost)")
        print(f"ok: all {len(expected)} keys hold their last acknowledged value "
              "after kill -9", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
