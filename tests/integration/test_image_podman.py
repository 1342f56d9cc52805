"""The exporter's image (deploy/Containerfile), built as ``make image`` builds it and run
as the Helm chart's pod spec says, against the real llama.cpp demo target.

1. Built by deploy/build-image.sh (what ``make image`` runs: a Debian root made by
   mmdebstrap, the project's wheel from this checkout) under a tag of this run's own,
   removed afterwards (the layers stay cached: ~15 s when nothing changed).
2. Its config: the user is the chart's ``runAsUser:runAsGroup``, the entrypoint
   ``prefilltui exporter``, the OCI labels the package's version and licence, and the
   chart's default tag (its appVersion) the image's version.
3. Which isolation starts a container on this machine is found by trying, in order:
   podman's defaults, rlimits within the host's hard limits, runc, crun without cgroups
   (each failure's error is printed).  Where none starts one, the same runs go inside
   the image's root with ``unshare`` + ``chroot`` instead; PREFILLTUI_IMAGE_ISOLATION=chroot
   forces that here.
4. Run with the image's own defaults (its user, a writable root) at the demo target:
   ``/metrics`` holds a fit, ``/probe?target=`` the target's page.
5. Run as the chart renders it (``helm template`` with ``image`` values naming the built
   image): its image, args, env, volumes (the targets ConfigMap as read-only files, the
   emptyDirs as host folders) and securityContext (read-only root with no writable
   place but the volumes, the uid/gid, fsGroup as a supplementary group, no capability,
   no privilege escalation): the same answers, the run file in the runs volume, a write
   to the root refused, and SIGTERM ends it with status 0 within the chart's grace period.

The container has a network of its own (slirp4netns) that reaches the host's loopback,
where the demo target listens, as 10.0.2.2; its port is published on 127.0.0.1 only.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
import tomllib
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

import prefilltui
from prefilltui.demo.server import free_port
from tests.components import missing, require
from tests.unit.test_helm_chart import objects, render

ROOT = Path(__file__).resolve().parents[2]
#: what the container's slirp4netns network calls the host's loopback
HOST_LOOPBACK = "10.0.2.2"
SLIRP = "slirp4netns:allow_host_loopback=true"
LENGTHS = "32,64"  # short prompts: a busy 2-core machine answers them in well under a second
#: ok probes before the answers are read: enough for a fit of two lengths
PROBES = 4

pytestmark = [pytest.mark.component, pytest.mark.timeout(1500)]


def _podman(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout,
                       stdin=subprocess.DEVNULL)
    if check and p.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)}: exit {p.returncode}: {p.stderr[-2000:]}")
    return p


# ------------------------------------------------------------------ the image, built

@pytest.fixture(scope="module")
def image() -> str:
    if os.geteuid() != 0:
        missing("podman", "the image's build and run need root (mmdebstrap's root mode, "
                          "rootful podman)")
    require("podman")
    ref = f"localhost/prefilltui-test:{uuid.uuid4().hex[:10]}"
    t0 = time.monotonic()
    p = subprocess.run([str(ROOT / "deploy" / "build-image.sh")], cwd=ROOT,
                       env={**os.environ, "IMAGE": ref, "PYTHON": sys.executable},
                       capture_output=True, text=True, timeout=1200, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, f"build-image.sh exit {p.returncode}:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    print(f"image {ref} built in {time.monotonic() - t0:.0f} s:\n{p.stdout}")
    yield ref
    _podman("rmi", "-f", ref, check=False)


def _inspect(ref: str) -> dict:
    (info,) = json.loads(_podman("image", "inspect", ref).stdout)
    return info


def _chart(ref: str, values: dict) -> tuple[dict, dict]:
    """The rendered StatefulSet and targets ConfigMap, with ``image`` values naming ``ref``."""
    repo, tag = ref.rsplit(":", 1)
    objs = objects(render({"image": {"repository": repo, "tag": tag}, **values}))
    (sts,) = [o for o in objs if o["kind"] == "StatefulSet"]
    (targets,) = [o for o in objs if o["kind"] == "ConfigMap"
                  and o["metadata"]["name"].endswith("-targets")]
    return sts, targets


def test_the_image_config_is_the_charts_user_entrypoint_and_labels(image):
    cfg = _inspect(image)["Config"]
    pod = _chart(image, {})[0]["spec"]["template"]["spec"]
    sc = pod["securityContext"]
    assert sc["runAsUser"] != 0
    assert cfg["User"] == f"{sc['runAsUser']}:{sc['runAsGroup']}"
    assert cfg["Entrypoint"] == ["prefilltui", "exporter"]
    labels = cfg["Labels"]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert labels["org.opencontainers.image.version"] == prefilltui.__version__
    assert labels["org.opencontainers.image.licenses"] == project["license"]["text"]
    assert labels["org.opencontainers.image.source"]
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                          text=True).stdout.strip()
    if head:
        assert labels["org.opencontainers.image.revision"].startswith(head)
    # the chart's default tag is its appVersion: the image's version
    default, _ = _chart("prefilltui:x", {"image": {"repository": "prefilltui", "tag": ""}})
    (c,) = default["spec"]["template"]["spec"]["containers"]
    assert c["image"] == f"prefilltui:{prefilltui.__version__}"
    print(f"image size: {_inspect(image)['Size'] / 1e6:.0f} MB")


# ------------------------------------------------------------------ how to run it here

def _rlimits() -> list[str]:
    """Rlimits within this process's hard limits: podman's defaults (nofile 1048576)
    are refused where the sandbox lacks CAP_SYS_RESOURCE; podman itself lowers its nproc
    to 32768, which its runtime cannot raise again."""
    def hard(which: int, cap: int) -> int:
        h = resource.getrlimit(which)[1]
        return cap if h == resource.RLIM_INFINITY else min(h, cap)

    nofile = hard(resource.RLIMIT_NOFILE, 1048576)
    nproc = hard(resource.RLIMIT_NPROC, 32768)
    return ["--ulimit", f"nofile={nofile}:{nofile}", "--ulimit", f"nproc={nproc}:{nproc}"]


@dataclass
class Isolation:
    name: str
    podman_flags: list[str] | None  # None: unshare + chroot, no container runtime
    refused: list[str] = field(default_factory=list)  # "what: error" of those tried before


@pytest.fixture(scope="module")
def isolation(image) -> Isolation:
    candidates = [("podman's defaults", []),
                  ("rlimits within the host's", _rlimits()),
                  ("runc, rlimits within the host's", [*_rlimits(), "--runtime", "runc"]),
                  ("crun without cgroups, rlimits within the host's",
                   [*_rlimits(), "--runtime", "crun", "--cgroups=disabled"])]
    refused = []
    if os.environ.get("PREFILLTUI_IMAGE_ISOLATION") != "chroot":
        for name, flags in candidates:
            p = _podman("run", "--rm", *flags, "--network", SLIRP, "--entrypoint", "python3",
                        image, "-c", "print('started')", check=False)
            if p.returncode == 0 and p.stdout.strip() == "started":
                print(f"isolation: {name} ({' '.join(flags) or 'no flags'}); refused: {refused}")
                return Isolation(name, flags, refused)
            err = (p.stderr.strip().splitlines() or ["(no message)"])[-1]
            refused.append(f"{name}: exit {p.returncode}: {err}")
    print(f"isolation: unshare + chroot in the image's root; podman refused: {refused}")
    return Isolation("unshare + chroot", None, refused)


@dataclass
class Spec:
    """One container as a pod spec describes it."""
    image: str
    args: list[str]
    port: int  # the container's listening port
    env: dict[str, str] = field(default_factory=dict)
    user: str | None = None  # "uid:gid"; None: the image's USER
    groups: list[int] = field(default_factory=list)  # supplementary (fsGroup)
    read_only: bool = False
    drop_all_caps: bool = False
    no_new_privileges: bool = False
    mounts: list[tuple[Path, str, bool]] = field(default_factory=list)  # host, path, read-only


class Running:
    """A started container: ``metrics_url``, ``pid`` (the exporter's, as the host sees
    it), ``write_to_root()``, ``stop(grace)`` -> exit status, ``logs()``."""

    def __init__(self, iso: Isolation, spec: Spec, workdir: Path):
        self.iso, self.spec = iso, spec
        self.host_port = free_port()
        self.metrics_url = f"http://127.0.0.1:{self.host_port}"
        self.name = f"prefilltui-test-{uuid.uuid4().hex[:10]}"
        self._log = workdir / f"{self.name}.log"
        self.proc: subprocess.Popen | None = None
        try:
            if iso.podman_flags is not None:
                self._start_podman()
            else:
                self._start_chroot(workdir)
        except BaseException:
            self.remove()  # a container created but not started, a mount
            raise

    # -- podman
    def _start_podman(self) -> None:
        s = self.spec
        cmd = ["run", "-d", "--name", self.name, *self.iso.podman_flags, "--network", SLIRP,
               "-p", f"127.0.0.1:{self.host_port}:{s.port}"]
        if s.user:
            cmd += ["--user", s.user]
        for g in s.groups:
            cmd += ["--group-add", str(g)]
        if s.read_only:  # only the volumes writable, as Kubernetes: no tmpfs of podman's own
            cmd += ["--read-only", "--read-only-tmpfs=false"]
        if s.drop_all_caps:
            cmd += ["--cap-drop", "all"]
        if s.no_new_privileges:
            cmd += ["--security-opt", "no-new-privileges"]
        for host, path, ro in s.mounts:
            cmd += ["-v", f"{host}:{path}{':ro' if ro else ''}"]
        for k, v in s.env.items():
            cmd += ["-e", f"{k}={v}"]
        _podman(*cmd, s.image, *s.args)
        self.pid = int(_podman("inspect", "--format", "{{.State.Pid}}", self.name).stdout)

    # -- unshare + chroot: the image's root (a container's mount, so mount points can
    # be made), bound read-only over itself in a private mount namespace, the volumes
    # on top, the exporter as PID 1 of its own PID namespace, on the host's network
    def _start_chroot(self, workdir: Path) -> None:
        s = self.spec
        _podman("create", "--name", self.name, s.image)
        root = _podman("mount", self.name).stdout.strip()
        cfg = _inspect(s.image)["Config"]
        for _, path, _ in s.mounts:
            Path(root, path.lstrip("/")).mkdir(parents=True, exist_ok=True)
        user = s.user or cfg["User"]
        env = dict(e.split("=", 1) for e in cfg["Env"]) | s.env
        args = list(s.args)
        for i, a in enumerate(args):  # the host's network: listen on its loopback only
            if a.startswith("--listen="):
                args[i] = f"--listen=127.0.0.1:{self.host_port}"
            elif a == "--listen":
                args[i + 1] = f"127.0.0.1:{self.host_port}"
        script = ["set -e", 'R="$1"', "mount --make-rprivate /",
                  'mount --bind "$R" "$R"', "mount -t proc proc \"$R/proc\"",
                  'mount --rbind /dev "$R/dev"']
        if s.read_only:
            script.append('mount -o remount,bind,ro "$R"')
        for host, path, ro in s.mounts:
            script.append(f'mount --bind {host} "$R{path}"')
            if ro:
                script.append(f'mount -o remount,bind,ro "$R{path}"')
        groups = ",".join(str(g) for g in s.groups)
        script.append(f'cd "$R{cfg.get("WorkingDir") or "/"}"')
        script.append(" ".join(["exec chroot", f"--userspec={user}",
                                *([f"--groups={groups}"] if groups else []), '"$R"',
                                "/usr/bin/env", "-i",
                                *(f"'{k}={v}'" for k, v in env.items()),
                                *cfg["Entrypoint"], *(f"'{a}'" for a in args)]))
        self._root = root
        with open(self._log, "w") as log:
            self.proc = subprocess.Popen(
                ["unshare", "--mount", "--pid", "--fork", "--kill-child=SIGKILL", "sh", "-c",
                 "\n".join(script), "sh", root], stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            kids = psutil.Process(self.proc.pid).children()
            if kids and kids[0].name() != "sh":
                self.pid = kids[0].pid
                return
            if self.proc.poll() is not None:
                raise AssertionError(f"the chroot run ended: {self.logs()}")
            time.sleep(0.1)
        raise AssertionError(f"the exporter did not start in the chroot: {self.logs()}")

    def write_to_root(self) -> subprocess.CompletedProcess:
        code = "open('/opt/prefilltui/written-by-the-test', 'w')"
        if self.iso.podman_flags is not None:
            return _podman("exec", self.name, "python3", "-c", code, check=False)
        user = self.spec.user or _inspect(self.spec.image)["Config"]["User"]
        return subprocess.run(["nsenter", "-t", str(self.pid), "-m", "chroot",
                               f"--userspec={user}", self._root, "python3", "-c", code],
                              capture_output=True, text=True, timeout=60)

    def logs(self) -> str:
        if self.iso.podman_flags is not None:
            p = _podman("logs", self.name, check=False)
            return p.stdout + p.stderr
        return self._log.read_text() if self._log.exists() else ""

    def stop(self, grace: float) -> int:
        """SIGTERM, then at most ``grace`` seconds (then SIGKILL): the exit status."""
        if self.iso.podman_flags is not None:
            _podman("stop", "-t", str(int(grace)), self.name, timeout=grace + 60)
            return int(_podman("inspect", "--format", "{{.State.ExitCode}}", self.name).stdout)
        os.kill(self.pid, signal.SIGTERM)
        try:
            return self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return 137

    def remove(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.iso.podman_flags is None:
            _podman("umount", self.name, check=False)
        _podman("rm", "-f", "-v", self.name, check=False)


# ------------------------------------------------------------------ reading its answers

def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read().decode()


def _samples(text: str) -> dict[str, list]:
    out: dict[str, list] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append(s)
    return out


def _value(samples: dict, name: str, **labels) -> float | None:
    for s in samples.get(name, []):
        if all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    return None


def _answers(run: Running, target: str, timeout: float = 300) -> tuple[str, str]:
    """(/metrics, /probe?target=) once the target has PROBES ok probes and a fit."""
    deadline = time.monotonic() + timeout
    last = "nothing yet"
    while time.monotonic() < deadline:
        try:
            text = _get(f"{run.metrics_url}/metrics")
            s = _samples(text)
            ok = _value(s, "prefilltui_probes_total", target=target, outcome="ok") or 0
            tps = _value(s, "prefilltui_prefill_throughput_tokens_per_second", target=target)
            last = f"{ok:.0f} ok probes, throughput {tps}"
            if ok >= PROBES and tps and tps > 0:
                probe = _get(f"{run.metrics_url}/probe?target={urllib.parse.quote(target, safe='')}")
                return text, probe
        except OSError as e:
            last = repr(e)
        time.sleep(1)
    raise AssertionError(f"no fit from the exporter in the container after {timeout:.0f} s "
                         f"({last}); its log:\n{run.logs()[-3000:]}")


def _check_answers(metrics: str, probe: str, target: str) -> None:
    s = _samples(metrics)
    assert _value(s, "prefilltui_target_up", target=target) == 1
    assert _value(s, "prefilltui_build_info", version=prefilltui.__version__) == 1
    info = [x for x in s["prefilltui_target_info"] if x.labels["target"] == target]
    assert info and info[0].labels["server_kind"] == "llama.cpp"
    p = _samples(probe)
    assert _value(p, "prefilltui_target_up", target=target) == 1
    assert (_value(p, "prefilltui_prefill_throughput_tokens_per_second", target=target) or 0) > 0
    # /probe is that target's page only, without the process-wide series
    assert "prefilltui_build_info" not in p


def _excerpt(text: str, *names: str) -> str:
    return "\n".join(ln for ln in text.splitlines() if ln.startswith(names))


def _target(iso: Isolation, llama_server) -> str:
    host = "127.0.0.1" if iso.podman_flags is None else HOST_LOOPBACK
    return f"http://{host}:{llama_server.port}"


# ------------------------------------------------------------------ the runs

def test_the_image_runs_the_exporter_at_the_demo_target(image, isolation, llama_server,
                                                        tmp_path):
    target = _target(isolation, llama_server)
    cmd = _inspect(image)["Config"]["Cmd"]  # the image's defaults, plus the target
    port = int(cmd[cmd.index("--listen") + 1].rsplit(":", 1)[1])
    grace = _chart(image, {})[0]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    run = Running(isolation, Spec(image, [*cmd, "--interval", "1", "--lengths", LENGTHS,
                                          target], port), tmp_path)
    try:
        metrics, probe = _answers(run, target)
        _check_answers(metrics, probe, target)
        assert run.stop(grace) == 0, run.logs()
    finally:
        run.remove()
    print(f"isolation {isolation.name}\n/metrics (excerpt):\n"
          + _excerpt(metrics, "prefilltui_prefill_", "prefilltui_target_up", "prefilltui_verdict")
          + f"\n/probe?target={target}: {len(probe.splitlines())} lines")


def test_the_chart_rendered_container_runs_read_only_as_its_user(image, isolation,
                                                                 llama_server, tmp_path):
    target = _target(isolation, llama_server)
    sts, targets_cm = _chart(image, {"targets": [{"targets": [target],
                                                  "labels": {"__prefilltui_lengths": LENGTHS}}],
                                     "intervalSeconds": 1})
    pod = sts["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    psc, csc = pod["securityContext"], c["securityContext"]
    assert c["image"] == image  # the values name the image this test built
    # the pod's environment: plain values, and the ordinal of replica 0 for its shard
    env = {}
    for e in c["env"]:
        if "value" in e:
            env[e["name"]] = e["value"]
        else:
            assert e["valueFrom"]["fieldRef"]["fieldPath"].endswith("pod-index']")
            env[e["name"]] = "0"
    args = list(c["args"])
    for k, v in env.items():  # Kubernetes expands $(VAR) in args
        args = [a.replace(f"$({k})", v) for a in args]
    # the volumes as host folders: the ConfigMap's files read-only, emptyDirs writable
    # by the fsGroup as Kubernetes makes them
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = []
    for m in c["volumeMounts"]:
        d = tmp_path / "volumes" / m["name"]
        d.mkdir(parents=True)
        if "configMap" in volumes[m["name"]]:
            for key, text in targets_cm["data"].items():
                (d / key).write_text(text)
        else:
            assert "emptyDir" in volumes[m["name"]]
            os.chown(d, 0, psc["fsGroup"])
            d.chmod(0o2775)
        mounts.append((d, m["mountPath"], bool(m.get("readOnly"))))
    port = next(p["containerPort"] for p in c["ports"] if p["name"] == "metrics")
    assert csc["capabilities"]["drop"] == ["ALL"] and psc["runAsNonRoot"] is True
    spec = Spec(c["image"], args, port, env=env,
                user=f"{psc['runAsUser']}:{psc['runAsGroup']}", groups=[psc["fsGroup"]],
                read_only=csc["readOnlyRootFilesystem"], drop_all_caps=True,
                no_new_privileges=not csc["allowPrivilegeEscalation"], mounts=mounts)
    assert spec.read_only and spec.no_new_privileges
    run = Running(isolation, spec, tmp_path)
    try:
        metrics, probe = _answers(run, target)
        _check_answers(metrics, probe, target)
        uids = psutil.Process(run.pid).uids()
        assert (uids.real, uids.effective) == (psc["runAsUser"],) * 2
        assert psutil.Process(run.pid).gids().real == psc["runAsGroup"]
        w = run.write_to_root()
        assert w.returncode != 0 and "Read-only file system" in w.stderr, w
        # the run file: in the runs volume, one JSONL line per probe at least
        (run_arg,) = [a for a in args if a.startswith("--run-dir=")]
        run_dir = run_arg.split("=", 1)[1]
        (vol, path, _) = next(m for m in mounts if run_dir.startswith(m[1] + "/"))
        files = list((vol / Path(run_dir).relative_to(path)).glob("*.jsonl"))
        assert files and len(files[0].read_text().splitlines()) >= PROBES
        assert run.stop(pod["terminationGracePeriodSeconds"]) == 0, run.logs()
    finally:
        run.remove()
    print(f"isolation {isolation.name}, user {spec.user}, read-only root\n/metrics (excerpt):\n"
          + _excerpt(metrics, "prefilltui_prefill_", "prefilltui_target_up", "prefilltui_verdict",
                     "prefilltui_shard_targets")
          + f"\n/probe?target={target}:\n" + _excerpt(probe, "prefilltui_target_up",
                                                      "prefilltui_prefill_throughput"))
