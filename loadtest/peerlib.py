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
