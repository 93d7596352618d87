#!/usr/bin/env python3
"""The installed package as a user outside the tree meets it (issue 18).

Installs the build tree to a temporary prefix, configures and builds
tests/install/consumer (an HTTP route calling a named gen_server; links
smarm::http, smarm::metrics and smarm::config) against that prefix alone,
runs it, asks the route twice, and stops it with SIGTERM (exit 0 expected).

Usage: install_test.py BUILD_DIR
"""
import http.client
import os
import shutil
import signal
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def step(what, cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        sys.exit(f"FAIL: {what} (exit {r.returncode}): {' '.join(cmd)}\n{r.stdout[-4000:]}"
                 f"\n{r.stderr[-4000:]}")
    return r


def main():
    build = os.path.abspath(sys.argv[1])
    tmp = tempfile.mkdtemp(prefix="smarm-install-")
    try:
        prefix = os.path.join(tmp, "prefix")
        step("install", ["cmake", "--install", build, "--prefix", prefix])
        for f in ("lib/cmake/smarm/smarmConfig.cmake", "include/smarm/http/server.hpp"):
            if not os.path.exists(os.path.join(prefix, f)):
                sys.exit(f"FAIL: the install has no {f}")
        out = os.path.join(tmp, "build")
        # Only the prefix: nothing from the source or build tree may leak in.
        step("configure the consumer",
             ["cmake", "-S", os.path.join(HERE, "consumer"), "-B", out,
              f"-DCMAKE_PREFIX_PATH={prefix}", "-DCMAKE_BUILD_TYPE=Release"])
        step("build the consumer", ["cmake", "--build", out, "-j", "2"])
        proc = subprocess.Popen([os.path.join(out, "consumer")], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            line = proc.stdout.readline()
            if not line.startswith("listening on "):
                sys.exit(f"FAIL: the consumer printed {line!r}; stderr: {proc.stderr.read()}")
            port = int(line.split()[-1])
            for want in ("ada 1\n", "ada 2\n"):
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                c.request("GET", "/count/ada")
                r = c.getresponse()
                body = r.read().decode()
                c.close()
                if r.status != 200 or body != want:
                    sys.exit(f"FAIL: GET /count/ada: {r.status} {body!r}, want 200 {want!r}")
            proc.send_signal(signal.SIGTERM)
            rc = proc.wait(timeout=20)
            if rc != 0:
                sys.exit(f"FAIL: the consumer exited {rc} after SIGTERM: {proc.stderr.read()}")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        print("ok: installed package configured, built and served an out-of-tree program")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
