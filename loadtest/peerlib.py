"""Helpers shared by the peer comparison scripts (loadtest/*/compare*.py)."""
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def go_build(src, out_dir, name):
    """Builds one Go program (GOPATH mode, private build cache) into out_dir."""
    env = dict(os.environ, GO111MODULE="off", GOCACHE=os.path.join(out_dir, "gocache"))
    exe = os.path.join(out_dir, name)
    subprocess.run(["go", "build", "-o", exe, src], check=True, env=env)
    return exe
