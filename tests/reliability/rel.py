"""What the reliability tests share: starting smarm-server (optionally under
the fault shim), talking HTTP to it, and reading its RSS and fds from /proc.

Every test here runs the real smarm-server binary on loopback with port 0
(the log line gives the bound ports), so tests run in parallel.
"""
import collections
import http.client
import json
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time


class Server:
    """A running smarm-server. `log` is its combined stdout/stderr file."""

    def __init__(self, proc, port, admin_port, log):
        self.proc = proc
        self.port = port
        self.admin_port = admin_port
        self.log = log

    @property
    def pid(self):
        return self.proc.pid

    def text(self):
        with open(self.log, errors="replace") as f:
            return f.read()

    def rss_kib(self):
        """VmRSS of the server process, KiB."""
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise RuntimeError("no VmRSS")

    def fds(self):
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def nofile(self):
        """(soft, hard) open-file limit of the running server."""
        with open(f"/proc/{self.pid}/limits") as f:
            for line in f:
                if line.startswith("Max open files"):
                    soft, hard = line.split()[3:5]
                    return int(soft), int(hard)
        raise RuntimeError("no open-file limit")

    def metric(self, name, port=None):
        """The value of one unlabelled metric from /metrics (on the admin
        listener when there is one)."""
        _, body = request(port or self.admin_port or self.port, "GET", "/metrics")
        m = re.search(rb"^" + re.escape(name.encode()) + rb" (\S+)$", body, re.M)
        if not m:
            raise RuntimeError(f"no metric {name}")
        return float(m.group(1))

    def alive(self):
        return self.proc.poll() is None

    def stop(self, sig=signal.SIGTERM, timeout=30):
        """Signals the server and waits; returns its exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError(f"smarm-server did not stop within {timeout}s after {sig}")

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def start(binary, config, args=(), env=None, preload=None, log=None, timeout=20, nofile=None):
    """Starts smarm-server on 127.0.0.1 port 0 (admin on port 0 too) and waits
    until it listens. `preload`: a shared object for LD_PRELOAD; `nofile`:
    (soft, hard) RLIMIT_NOFILE to start it with."""
    if log is None:
        fd, log = tempfile.mkstemp(prefix="smarm-rel-", suffix=".log")
        os.close(fd)
    e = dict(os.environ)
    e.update(env or {})
    if preload:
        e["LD_PRELOAD"] = preload
    out = open(log, "w")
    cmd = [binary, "--config", config, "--http.host=127.0.0.1", "--http.port=0",
           "--admin.port=0", *args]
    def limits():
        if nofile:
            resource.setrlimit(resource.RLIMIT_NOFILE, nofile)
    p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=e,
                         preexec_fn=limits if nofile else None)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = open(log, errors="replace").read()
        m = re.search(r"smarm-server listening on 127\.0\.0\.1:(\d+)", text)
        if m:
            a = re.search(r"admin listener on 127\.0\.0\.1:(\d+)", text)
            return Server(p, int(m.group(1)), int(a.group(1)) if a else None, log)
        if p.poll() is not None:
            raise RuntimeError(f"smarm-server exited at start ({p.returncode}):\n{text}")
        time.sleep(0.02)
    p.kill()
    raise RuntimeError("smarm-server did not start:\n" + open(log).read())


def wait_kv(port, timeout=20):
    """Waits until the kv service answers: it registers only after its log
    is open and replayed, and a route to it answers 503 until then."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, _ = request(port, "GET", "/kv/--ready-probe--")
        if status != 503:
            return
        time.sleep(0.05)
    fail(f"kv did not start within {timeout} s")


def request(port, method, path, body=None, timeout=10, headers=None):
    """One request on a fresh connection: (status, body bytes)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def raw(port, data, timeout=10):
    """Sends raw bytes, returns everything the server sent until it closed
    (or the timeout)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(data)
        return read_until_close(s, timeout)
    finally:
        s.close()


def read_until_close(s, timeout):
    s.settimeout(timeout)
    out = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            out += b
    except (socket.timeout, ConnectionResetError):
        pass
    return out


def status_of(response_bytes):
    m = re.match(rb"HTTP/1\.[01] (\d{3})", response_bytes)
    return int(m.group(1)) if m else None


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# What smarm-server's routes may answer (a kv call that timed out: 504).
DOCUMENTED = {"200", "201", "204", "404", "503", "504"}
ABSENT = None  # a key that must not (or may not) be stored


def load(binary, port, path, args, seconds, timeout="5s", progress=False):
    """Starts smarm-load at 127.0.0.1:port (one thread, a JSON report) for
    `seconds`; `args` adds options (-c, -s SCENARIO, -R, ...). Quiet unless
    `progress`: then load_report() returns its per-second lines too.
    Returns the run for load_report()."""
    fd, out = tempfile.mkstemp(prefix="smarm-rel-load-", suffix=".json")
    os.close(fd)
    p = subprocess.Popen([binary, f"http://127.0.0.1:{port}{path}", "-t", "1",
                          "-d", f"{int(seconds)}s", "--timeout", timeout,
                          *([] if progress else ["-q"]), "--json", out, *args],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return p, out


def scenario(name):
    return ["-s", f"{ROOT}/loadtest/scenarios/{name}"]


def load_report(run, timeout=120):
    """Waits for a load() run to end; fails unless it exited 0; its report
    (with "progress": its per-second lines, when it printed them)."""
    p, out = run
    _, err = p.communicate(timeout=timeout)
    check(p.returncode == 0, f"smarm-load exited {p.returncode}: {err.decode()[-500:]}")
    with open(out) as f:
        r = json.load(f)
    os.unlink(out)
    r["progress"] = [line for line in err.decode(errors="replace").splitlines()
                     if line.startswith("[")]
    return r


def check_statuses(name, r, allowed=DOCUMENTED):
    """Fails unless a load report has answers and only `allowed` statuses."""
    odd = {s: n for s, n in r["statuses"].items() if s not in allowed}
    check(not odd, f"{name}: undocumented statuses {odd} (of {r['statuses']})")
    check(r["statuses"].get("200", 0) > 0, f"{name}: nothing served: {r['statuses']}")


def check_kv(port, expected, after="after the restart"):
    """GETs every key of `expected` (key -> the set of values it may hold,
    ABSENT for not stored) and fails naming the ones that hold anything
    else. Returns how many were checked."""
    bad = []
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
    try:
        for key, possible in expected.items():
            c.request("GET", f"/kv/{key}")
            r = c.getresponse()
            body = r.read().decode()
            got = body if r.status == 200 else ABSENT if r.status == 404 else f"<{r.status}>"
            if got not in possible:
                want = sorted(str(v)[:40] for v in possible)
                bad.append(f"{key}: found {str(got)[:40]!r}, expected one of {want}")
    finally:
        c.close()
    check(not bad, f"{len(bad)} of {len(expected)} keys wrong {after}:\n  " +
          "\n  ".join(bad[:20]))
    return len(expected)


def restart_and_check_kv(binary, config, args, expected, after="after the restart"):
    """Starts smarm-server again on the same data (no shim), checks every
    key of `expected` (check_kv) and stops it. Returns how many were
    checked."""
    srv = start(binary, config, args)
    try:
        wait_kv(srv.port)
        return check_kv(srv.port, expected, after)
    finally:
        srv.stop()


def injected_faults(fault_log):
    """What the fault shim injected (SMARM_FAULT_LOG): "op:effect" -> count."""
    counts = collections.Counter()
    if os.path.exists(fault_log):
        with open(fault_log) as f:
            for line in f:
                op, _target, effect = line.split()
                counts[f"{op}:{effect}"] += 1
    return counts


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


class PauseWatch(threading.Thread):
    """Sleeps 50 ms at a time and records every oversleep of PAUSE_NOTE
    seconds or more as (start, seconds) on the monotonic clock: the machine
    did not run this process for that long."""

    TICK = 0.05
    PAUSE_NOTE = 0.5

    def __init__(self):
        super().__init__(daemon=True)
        self.stop = threading.Event()
        self.pauses = []

    def run(self):
        last = time.monotonic()
        while not self.stop.wait(self.TICK):
            now = time.monotonic()
            if now - last - self.TICK >= self.PAUSE_NOTE:
                self.pauses.append((last, now - last - self.TICK))
            last = now


def steal_seconds():
    """Time this VM's CPUs waited for its host (the `cpu` line of /proc/stat)."""
    with open("/proc/stat") as f:
        fields = f.readline().split()
    return int(fields[8]) / os.sysconf("SC_CLK_TCK") if len(fields) > 8 else 0.0
