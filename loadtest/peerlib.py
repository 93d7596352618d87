"""Helpers shared by the peer comparison scripts (loadtest/*/compare*.py)."""
import os
import socket
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def go_build(src, out_dir, name):
    """Builds one Go program (GOPATH mode, private build cache) into out_dir."""
    env = dict(os.environ, GO111MODULE="off", GOCACHE=os.path.join(out_dir, "gocache"))
    exe = os.path.join(out_dir, name)
    subprocess.run(["go", "build", "-o", exe, src], check=True, env=env)
    return exe


def wait_port(port, timeout=15.0):
    """True once 127.0.0.1:port accepts a connection (within timeout seconds)."""
    end = time.time() + timeout
    while time.time() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.05)
    return False


def h2o_docroot(tmp):
    """Makes tmp/h2o/www/plaintext ("Hello, World!") for h2o's static file
    handler and returns tmp/h2o. h2o started as root serves as nobody, so
    the file must be readable through every directory above it (mkdtemp
    makes tmp 0700)."""
    rundir = os.path.join(tmp, "h2o")
    www = os.path.join(rundir, "www")
    os.makedirs(www, exist_ok=True)
    with open(os.path.join(www, "plaintext"), "w") as f:
        f.write("Hello, World!")
    for d in (tmp, rundir, www):
        os.chmod(d, 0o755)
    os.chmod(os.path.join(www, "plaintext"), 0o644)
    return rundir

