#!/usr/bin/env python3
"""Checks the packaging files against each other and against the build:

- Dockerfile: bookworm build and runtime stages, a non-root USER, HEALTHCHECK
  on /healthz, EXPOSE of the port the image configures, the entrypoint; and
  every shared library smarm-server links comes from a package the runtime
  stage installs (or one every Debian base has).
- compose.yaml + prometheus.yml: Prometheus scrapes smarm's /metrics on the
  admin port the image serves it on (not published by compose).
- k8s: probes on /healthz and /readyz through a declared port, the Service
  targets it, the HPA targets the Deployment, the pod's user is the image's,
  the grace period outlasts http.drain_timeout, vm.max_map_count documented.

usage: manifests_test.py ROOT SMARM_SERVER_BINARY
"""
import re
import subprocess
import sys

import yaml

# In every bookworm image (minbase): no need to install them.
BASE_PACKAGES = {"libc6", "libstdc++6", "libgcc-s1", "zlib1g"}


def depends_closure(packages):
    """The packages apt installs for `packages` (--no-install-recommends):
    them and their Depends and Pre-Depends, recursively, as this Debian
    (the image's release) declares them."""
    seen, todo = set(), list(packages)
    while todo:
        pkg = todo.pop()
        if pkg in seen:
            continue
        seen.add(pkg)
        q = subprocess.run(["dpkg-query", "-W", "-f=${Depends}, ${Pre-Depends}", pkg],
                           capture_output=True, text=True)
        if q.returncode != 0:
            continue  # not installed here: its own name is all we know
        for alt in q.stdout.replace("|", ",").split(","):
            name = alt.strip().split(" ")[0].split(":")[0]
            if name:
                todo.append(name)
    return seen


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def main():
    root, server = sys.argv[1], sys.argv[2]
    dockerfile = open(f"{root}/docker/Dockerfile").read()
    stages = re.findall(r"^FROM (\S+)", dockerfile, re.M)
    check(stages == ["debian:bookworm", "debian:bookworm"], f"stages: {stages}")
    runtime = dockerfile[dockerfile.rindex("\nFROM "):]
    user = re.search(r"^USER (\S+)", runtime, re.M)
    check(user and user.group(1) not in ("root", "0"), "runtime stage must set a non-root USER")
    uid = re.search(r"useradd [^\n]*--uid (\d+)", runtime)
    check(uid is not None, "the runtime user needs a fixed uid")
    uid = int(uid.group(1))
    hc = re.search(r"^HEALTHCHECK .*?CMD (.*)$", runtime, re.M | re.S)
    check(hc and "/healthz" in hc.group(1), "HEALTHCHECK must probe /healthz")
    port = re.search(r"SMARM_HTTP_PORT=(\d+)", runtime)
    check(port is not None, "the image must set SMARM_HTTP_PORT")
    port = int(port.group(1))
    expose = [int(p) for p in re.findall(r"^EXPOSE (.*)$", runtime, re.M)[0].split()]
    check(port in expose, f"EXPOSE {expose} lacks the HTTP port {port}")
    admin = re.search(r"SMARM_ADMIN_PORT=(\d+)", runtime)
    check(admin is not None and re.search(r"SMARM_ADMIN_HOST=0\.0\.0\.0", runtime),
          "the image must serve its admin listener beyond loopback (for the scraper)")
    admin = int(admin.group(1))
    check(admin in expose and admin != port, f"EXPOSE {expose} lacks the admin port {admin}")
    check(re.search(r'^ENTRYPOINT \["/usr/local/bin/smarm-server"', runtime, re.M),
          "ENTRYPOINT must run smarm-server")

    # Every linked library's package is installed by the runtime stage.
    install = re.search(r"apt-get install -y --no-install-recommends(.*?)&&", runtime, re.S)
    installed = depends_closure(set(install.group(1).replace("\\", " ").split()))
    ldd = subprocess.run(["ldd", server], capture_output=True, text=True, check=True).stdout
    for line in ldd.splitlines():
        m = re.match(r"\s*(\S+) => (\S+)", line)
        if not m or "vdso" in m.group(1):
            continue
        # usrmerge: ldd may name /lib/... for a file dpkg knows as /usr/lib/...
        path = m.group(2)
        pkg = subprocess.run(["dpkg", "-S", path], capture_output=True, text=True)
        if pkg.returncode != 0 and path.startswith("/lib"):
            pkg = subprocess.run(["dpkg", "-S", "/usr" + path], capture_output=True, text=True)
        check(pkg.returncode == 0, f"no package owns {m.group(2)}")
        name = pkg.stdout.split(":")[0]
        check(name in installed or name in BASE_PACKAGES,
              f"smarm-server links {m.group(1)} from {name}, which the runtime stage does not install")

    compose = yaml.safe_load(open(f"{root}/docker/compose.yaml"))
    svc = compose["services"]
    check({"smarm", "prometheus"} <= set(svc), f"compose services: {list(svc)}")
    check(svc["smarm"]["build"]["dockerfile"] == "docker/Dockerfile", "compose builds the Dockerfile")
    check(any(str(p).endswith(f":{port}") for p in svc["smarm"]["ports"]), "compose publishes the port")
    prom = yaml.safe_load(open(f"{root}/docker/prometheus.yml"))
    job = prom["scrape_configs"][0]
    check(job.get("metrics_path", "/metrics") == "/metrics", "Prometheus scrapes /metrics")
    check(not any(str(p).endswith(f":{admin}") for p in svc["smarm"]["ports"]),
          "compose must not publish the admin port")
    check(job["static_configs"][0]["targets"] == [f"smarm:{admin}"],
          f"Prometheus target {job['static_configs'][0]['targets']}")
    check(any("prometheus.yml" in v for v in svc["prometheus"]["volumes"]),
          "compose mounts prometheus.yml")

    dep = yaml.safe_load(open(f"{root}/docker/k8s/deployment.yaml"))
    check(dep["kind"] == "Deployment", "deployment.yaml kind")
    pod = dep["spec"]["template"]["spec"]
    c = pod["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    check(ports.get("http") == port, f"container port http {ports}")
    check(ports.get("admin") == admin, f"container port admin {ports}")
    ann = dep["spec"]["template"]["metadata"]["annotations"]
    check(ann.get("prometheus.io/port") == str(admin), f"the scrape annotation's port: {ann}")
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        g = c[probe]["httpGet"]
        check(g["path"] == path and g["port"] in ports, f"{probe}: {g}")
    check(pod["securityContext"]["runAsUser"] == uid, "pod user differs from the image's")
    check(c["resources"]["limits"]["cpu"] and c["resources"]["requests"]["memory"], "resources")
    drain = yaml.safe_load(open(f"{root}/config/smarm.yaml"))["http"]["drain_timeout"]
    drain_s = float(re.match(r"(\d+)s$", drain).group(1))
    check(pod["terminationGracePeriodSeconds"] > drain_s,
          f"grace period {pod['terminationGracePeriodSeconds']} <= drain_timeout {drain}")
    check("vm.max_map_count" in open(f"{root}/docker/k8s/deployment.yaml").read(),
          "the vm.max_map_count requirement must be documented in the Deployment")
    sel = dep["spec"]["selector"]["matchLabels"]
    svc_k = yaml.safe_load(open(f"{root}/docker/k8s/service.yaml"))
    check(svc_k["spec"]["selector"] == sel, "Service selector differs from the Deployment's")
    check(svc_k["spec"]["ports"][0]["targetPort"] in ports, "Service targetPort")
    hpa = yaml.safe_load(open(f"{root}/docker/k8s/hpa.yaml"))
    ref = hpa["spec"]["scaleTargetRef"]
    check(ref["kind"] == "Deployment" and ref["name"] == dep["metadata"]["name"], f"HPA target {ref}")
    check(hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"], "HPA replica bounds")
    print("ok")


if __name__ == "__main__":
    main()
