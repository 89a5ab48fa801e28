"""Load a sensitive teacher from any source it is likely to come in.

One registry entry per source kind. Each loader returns a ``Teacher``: a
batch -> logits callable (forward only: the teacher is a black box to every
mechanism), its ``InputSpec``, the sha256 of the source file and a description.
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Optional

from dpconvert.errors import DpconvertError
from dpconvert.io.hashing import file_sha256
from dpconvert.io.teacher_runtime import RUNTIMES
from dpconvert.registry import Registry
from dpconvert.io.spec import InputSpec, parse_floats, parse_size
from dpconvert.option_fields import TEACHER, option


def _parse_mean(text: str) -> tuple:
    return parse_floats(text, "mean")


def _parse_std(text: str) -> tuple:
    return parse_floats(text, "std")


@dataclass
class LoadOptions:
    """How to load a teacher whose file does not say everything (the CLI's Teacher panel)."""

    PANEL: ClassVar[str] = TEACHER
    arch: Optional[str] = option(None, help="Architecture for weights-only files: timm:NAME (or NAME) or a registered one (e.g. datalens_cnn).",
                                 default_text="recognised from the weights' keys and shapes for common timm families")
    num_classes: Optional[int] = option(None, help="Number of classes (when the source does not say).")
    in_chans: Optional[int] = option(None, help="Input channels (e.g. 1 for grayscale timm models).")
    input_size: Optional[tuple[int, int, int]] = option(None, help="Input size C,H,W (e.g. 1,28,28).", parse=parse_size)
    mean: Optional[tuple[float, ...]] = option(None, help="Per-channel input mean, comma-separated.", parse=_parse_mean)
    std: Optional[tuple[float, ...]] = option(None, help="Per-channel input std, comma-separated.", parse=_parse_std)
    weights: Optional[str] = option(None, help="Local weights file for timm:NAME (works offline).")
    trust_pickle: bool = option(False, help="Allow unpickling a whole nn.Module. Unpickling runs code from the file: only for files you trust.")
    device: str = option("cpu", help="cpu, cuda or auto.")
    teacher_runtime: str = option("auto", help="Where a torch teacher answers: onnxruntime (exported, checked against torch on probe inputs; 1.2–3.4× "
                                  "faster on CPU for the CNNs measured), torch, or auto (onnxruntime on CPU in fp32 when the export agrees, else torch).",
                                  choices=tuple(RUNTIMES))


@dataclass
class Teacher:
    forward: Callable[[Any], Any]  # torch.Tensor (B,C,H,W) -> logits (B,K); no grad
    spec: InputSpec
    kind: str
    source: str
    description: str
    sha256: Optional[str] = None
    arch: Optional[str] = None
    num_params: Optional[int] = None
    module: Any = None  # the nn.Module when there is one (never used for gradients)
    warnings: list[str] = field(default_factory=list)
    weights_sha256: Optional[str] = None  # the weights' own hash, whatever file holds them (io/weights_hash.py)
    graph_sha256: Optional[str] = None  # an ONNX teacher: its graph's hash, as a dpconvert card binds a model (zoo_cards/onnx_meta.py)
    normalisation_assumed: Optional[str] = None  # the warning added when mean 0 / std 1 was assumed (a teacher card may say better)
    runtime: Optional[str] = None  # what answers for it, once a conversion chose (io/teacher_runtime.py; the card's run.teacher_runtime)

    def __call__(self, x):
        return self.forward(x)

    def info(self) -> dict:
        """What ``dpconvert inspect --json`` prints (keys documented in the README)."""
        return {
            "source": self.source,
            "kind": self.kind,
            "architecture": self.arch,
            "num_params": self.num_params,
            "input_spec": self.spec.to_dict(),
            "num_classes": self.spec.num_classes,
            "sha256": self.sha256,
            "weights_sha256": self.weights_sha256,
            "description": self.description,
            "warnings": list(self.warnings),
        }


# name -> (claims(source) -> bool, load(source, options) -> Teacher); tried in registration order.
LOADERS: Registry[tuple[Callable[[str], bool], Callable[[str, LoadOptions], Teacher]]] = Registry("teacher source")
_ORDER: list[str] = []


def _loader(name: str, claims: Callable[[str], bool]):
    def deco(fn):
        LOADERS.register(name)((claims, fn))
        _ORDER.append(name)
        return fn

    return deco


LFS_POINTER = b"version https://git-lfs.github.com/spec/"


def _require_file(source: str) -> Path:
    p = Path(source)
    if not p.is_file():
        raise DpconvertError(f"{source}: no such file", fix="check the teacher path (or use timm:NAME / builtin:digits)")
    with open(p, "rb") as f:
        head = f.read(len(LFS_POINTER))
    if head == LFS_POINTER:  # a Hub or Git clone without Git LFS: the file is a 130-byte pointer, not the weights
        raise DpconvertError(f"{source} is a Git LFS pointer, not the model", fix="run `git lfs pull` in its clone (or download the "
                             "file itself)")
    return p


def _torch_checkpoint_format(path: Path) -> Optional[str]:
    """"zip" (torch.save since 1.6), "pickle" (older torch.save), or None: not a file torch.save writes."""
    with open(path, "rb") as f:
        head = f.read(4)
    if head.startswith(b"PK\x03\x04"):
        return "zip"
    if head[:1] == b"\x80":  # pickle protocol 2 and later
        return "pickle"
    return None


def _suffix(*suffixes: str) -> Callable[[str], bool]:
    return lambda s: Path(s).suffix.lower() in suffixes and not s.startswith(("timm:", "builtin:"))


def _answered_classes(module, opts: LoadOptions) -> Optional[InputSpec]:
    """A graph that says nothing of its input (TorchScript): with the input size given, its class count is what it
    answers on a zero input (so `num_classes` need not be asked for what the model itself tells)."""
    import torch

    if opts.input_size is None or opts.num_classes is not None:
        return None
    try:
        k = _try_classes(module.eval(), torch.zeros(1, *opts.input_size))
    except Exception:  # noqa: BLE001 — a model that cannot answer this input is reported by the teacher checks
        return None
    return InputSpec(*opts.input_size, k) if k and k >= 2 else None


def _spec_from(base: Optional[InputSpec], opts: LoadOptions, what: str) -> InputSpec:
    """Merge a source-provided spec with user flags; flags win. Missing pieces name their flag."""
    c = h = w = k = None
    mean = std = None
    if base is not None:
        c, h, w, k, mean, std = base.channels, base.height, base.width, base.num_classes, base.mean, base.std
    if opts.input_size is not None:
        c, h, w = opts.input_size
    if opts.in_chans is not None:
        c = opts.in_chans
    if opts.num_classes is not None:
        k = opts.num_classes
    missing = ([] if None not in (c, h, w) else [("input size", "`input_size` C,H,W (e.g. 1,28,28)")]) + (
        [] if k is not None else [("class count", "`num_classes` K")])
    if missing:
        raise DpconvertError(f"{what}: cannot tell the {' or the '.join(name for name, _ in missing)}",
                             fix="give " + " and ".join(flag for _, flag in missing), param="input_size" if None in (c, h, w) else "num_classes")
    if opts.mean is not None:
        mean = opts.mean
    if opts.std is not None:
        std = opts.std
    if base is not None and opts.in_chans is not None and c != base.channels and opts.mean is None:
        mean, std = (sum(mean) / len(mean),), (sum(std) / len(std),)
    for given, values, flag in ((opts.mean, mean, "mean"), (opts.std, std, "std")):
        if given is None and values is not None and len(values) not in (1, c):  # the model's own normalisation, not a flag
            raise DpconvertError(f"{what}: the model normalises {len(values)} input channels but `input_size` gives {c}",
                                 fix=f"give the model's own input size (C = {len(values)}), or `mean` and `std` for {c} channel{'s' * (c > 1)}", param="input_size")
    return InputSpec(c, h, w, k, mean if mean is not None else (0.0,), std if std is not None else (1.0,))


NORMALISATION_UNKNOWN = ("input normalisation unknown: assuming mean 0, std 1 (pixels in [0, 1]); pass `mean`/`std` if the model "
                         "expects otherwise")


def _normalisation_warnings(known: bool, opts: LoadOptions) -> list[str]:
    """A warning when neither the source nor the flags say how inputs are normalised (mean 0, std 1 is then a guess)."""
    return [] if known or (opts.mean is not None and opts.std is not None) else [NORMALISATION_UNKNOWN]


def _module_spec(module, opts: LoadOptions) -> tuple[Optional[InputSpec], bool]:
    """(spec, normalisation known) from a module itself: timm's ``pretrained_cfg`` (input size, mean, std), its
    ``num_classes`` attribute, or a forward pass at the given input size to count the classes."""
    import torch

    cfg = getattr(module, "pretrained_cfg", None) or {}
    size = opts.input_size or (tuple(cfg["input_size"]) if cfg.get("input_size") else None)
    if size is None:
        return None, False
    k = opts.num_classes or getattr(module, "num_classes", None)
    if not k:
        try:
            k = _try_classes(module.eval(), torch.zeros(2, *size))
        except Exception:  # noqa: BLE001 - user code; the class count then has to come from --num-classes
            k = None
    if not k:
        return None, False
    mean, std = cfg.get("mean"), cfg.get("std")
    known = mean is not None and std is not None and len(mean) == size[0]
    return InputSpec(*size, int(k), tuple(mean) if known else (0.0,), tuple(std) if known else (1.0,)), known


def _torch_forward(module, device: str, channels_last: bool = False) -> Callable:
    """Forward in inference mode on ``device``. ``channels_last``: an eager module (our own code paths: builtin, state
    dicts, timm, pickled modules) runs in NHWC layout, which CPU convolutions run ~2-3× faster (benchmarks/RESULTS.md);
    the same arithmetic, so the same answers up to float rounding."""
    import torch

    module = module.to(device)
    try:
        module.eval()
    except NotImplementedError:  # torch.export modules are frozen in the mode they were exported in
        pass
    if channels_last:
        module = module.to(memory_format=torch.channels_last)

    def forward(x):
        x = x.to(device)
        if channels_last and x.dim() == 4:
            x = x.contiguous(memory_format=torch.channels_last)
        with torch.inference_mode():
            out = module(x)
        return out.float() if isinstance(out, torch.Tensor) else out  # anything else is refused by check_teacher, by name

    return forward


def _num_params(module) -> Optional[int]:
    try:
        return int(sum(p.numel() for p in module.parameters()))
    except Exception:  # exported programs and scripted modules without parameters()
        return None


def check_teacher(teacher: Teacher) -> Teacher:
    """Run the teacher once on a dummy batch; shape problems become clear errors, a final softmax a warning."""
    import torch

    x = torch.cat([torch.zeros(1, *teacher.spec.shape), torch.randn(3, *teacher.spec.shape, generator=torch.Generator().manual_seed(0))])
    try:
        out = teacher.forward(x)
    except Exception as e:  # the model itself rejected the input
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise DpconvertError(
            f"{teacher.source}: the teacher failed on an input of shape {tuple(x.shape)} ({first[:200]})",
            fix="fix `input_size` C,H,W to match the model", param="input_size"
        ) from None
    if isinstance(out, (tuple, list)):
        first = f"; the first is {tuple(out[0].shape)}" if out and isinstance(out[0], torch.Tensor) else ""
        raise DpconvertError(f"{teacher.source}: the teacher returns a {type(out).__name__} of {len(out)} values{first}; dpconvert needs a "
                             "classifier that returns one logits tensor", fix="export a wrapper that returns the logits alone")
    if not isinstance(out, torch.Tensor) or out.ndim != 2 or out.shape[0] != len(x):
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise DpconvertError(fix=f"{teacher.source}: the teacher returned {shape} for a batch of {len(x)}; dpconvert needs a classifier that "
                             "returns logits of shape (batch, classes)")
    if out.shape[1] != teacher.spec.num_classes:
        raise DpconvertError(
            f"{teacher.source}: the teacher returns {out.shape[1]} classes but `num_classes` says {teacher.spec.num_classes}", fix="fix `num_classes`", param="num_classes"
        )
    kind = _probability_output(out.float())
    if kind:
        teacher.warnings.append(f"the teacher's outputs look like {kind} (every row of a test batch): it ends in a softmax. The release "
                                "then carries less per query (Fashion-MNIST simulation: 35.8 % against 51.9 % with logits); export the "
                                "model without its final softmax if you can")
    return teacher


def _probability_output(out) -> Optional[str]:
    """'probabilities' or 'log-probabilities' when every row is one (a final softmax / log_softmax), else None."""
    import torch

    if not torch.isfinite(out).all():
        return None
    if (out >= 0).all() and torch.allclose(out.sum(1), torch.ones(len(out)), atol=1e-4):
        return "probabilities"
    if (out <= 0).all() and torch.allclose(torch.logsumexp(out, 1), torch.zeros(len(out)), atol=1e-4):
        return "log-probabilities"
    return None


# ---------------------------------------------------------------- builtin:NAME
@_loader("builtin", lambda s: s.startswith("builtin:"))
def load_builtin(source: str, opts: LoadOptions) -> Teacher:
    from dpconvert.builtin import BUILTIN_TEACHERS

    name = source[len("builtin:"):]
    path = BUILTIN_TEACHERS.get(name)
    teacher = _load_safetensors_file(str(path), opts, kind="builtin", source=source)
    teacher.description = f"built-in teacher {name!r} ({teacher.arch}, trained on scikit-learn digits by dpconvert.builtin.train_digits_teacher)"
    return teacher


# ---------------------------------------------------------------- timm:NAME[.TAG]
def _weights_classes(path: str, cfg) -> Optional[int]:
    """The class count local `weights` give the classifier timm's config names (``fc``, ``head.fc``, …), read from the
    file's tensor shapes; None when the file does not say."""
    classifier = cfg.classifier if isinstance(cfg.classifier, str) else None
    if classifier is None or not Path(path).is_file():
        return None
    key = f"{classifier}.weight"
    try:
        if path.endswith(".safetensors"):
            from safetensors import safe_open

            with safe_open(path, framework="pt") as f:
                return int(f.get_slice(key).get_shape()[0]) if key in f.keys() else None
        import torch

        state = torch.load(path, map_location="cpu", weights_only=True)
        state = state.get("state_dict", state) if isinstance(state, dict) else {}
        return int(state[key].shape[0]) if key in state else None
    except Exception:  # noqa: BLE001 — unreadable weights are reported when they are loaded
        return None



def _require_hub(source: str, timeout: float = 3.0) -> None:
    """A one-line error in seconds where the Hugging Face Hub cannot be reached (offline, or a sandbox): timm would
    otherwise retry for about a minute before failing with a page of retries."""
    import os
    import socket
    from urllib.parse import urlparse

    fix = "pass `weights` FILE to load local weights offline"
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        raise DpconvertError(f"{source}: HF_HUB_OFFLINE is set, so its pretrained weights cannot be downloaded", fix=fix, param="weights")
    endpoint = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    try:
        socket.create_connection((endpoint.hostname, endpoint.port or 443), timeout=timeout).close()
    except OSError:
        raise DpconvertError(f"{source}: the Hugging Face Hub ({endpoint.hostname}) cannot be reached from here to download its "
                             "pretrained weights", fix=fix, param="weights") from None



@_loader("timm", lambda s: s.startswith("timm:"))
def load_timm(source: str, opts: LoadOptions) -> Teacher:
    import timm

    from dpconvert.students.factory import create_timm

    name = source[len("timm:"):]
    if not timm.is_model(name.split(".")[0]):
        create_timm(name, InputSpec(1, 1, 1, 2), pretrained=False)  # raises with a close-match hint
    cfg = timm.get_pretrained_cfg(name) or timm.get_pretrained_cfg(name.split(".")[0])
    base = None
    if cfg is not None and cfg.input_size:
        classes = (_weights_classes(opts.weights, cfg) if opts.weights is not None else None) or cfg.num_classes or 1000
        base = InputSpec(cfg.input_size[0], cfg.input_size[1], cfg.input_size[2], classes, tuple(cfg.mean), tuple(cfg.std))
    spec = _spec_from(base, opts, source)
    if opts.weights is not None:
        _require_file(opts.weights)
    try:
        if opts.weights is not None:
            # Local weights are loaded strictly into the architecture (timm's pretrained path would
            # re-initialise a classifier whose class count differs from the hub config).
            from timm.models import load_checkpoint

            model = create_timm(name, spec, pretrained=False)
            load_checkpoint(model, opts.weights, strict=True)
        else:
            _require_hub(source)
            model = create_timm(name, spec, pretrained=True)
    except DpconvertError:
        raise
    except RuntimeError as e:
        if opts.weights is not None:
            raise DpconvertError(f"{source}: `weights` do not fit the model ({_first_mismatch(str(e))})", fix="check `num_classes` and `in_chans`", param="num_classes") from None
        raise DpconvertError(f"{source}: could not load pretrained weights ({str(e).splitlines()[0][:200]})", fix="pass `weights` FILE to load local weights offline", param="weights") from None
    except Exception as e:  # hub unreachable, unreadable weights file
        msg = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
        raise DpconvertError(f"{source}: could not load pretrained weights ({msg})", fix="pass `weights` FILE to load local weights offline", param="weights") from None
    sha = file_sha256(opts.weights) if opts.weights else None
    return Teacher(
        _torch_forward(model, opts.device, channels_last=True), spec, "timm", source,
        f"timm model {name}" + (f" with weights {Path(opts.weights).name}" if opts.weights else " (pretrained from the hub)"),
        sha, f"timm:{name}", _num_params(model), model,
    )


# ---------------------------------------------------------------- .onnx
@_loader("onnx", _suffix(".onnx"))
def load_onnx(source: str, opts: LoadOptions) -> Teacher:
    import numpy as np
    import onnxruntime as ort
    import torch

    path = _require_file(source)
    try:
        sess = ort.InferenceSession(str(path), providers=_ort_providers(opts.device))
    except Exception as e:
        raise DpconvertError(f"{source}: onnxruntime cannot load it ({str(e).splitlines()[0][:160]}); is it a valid ONNX model?") from None
    inp = sess.get_inputs()[0]
    dims = [d if isinstance(d, int) else None for d in inp.shape]
    base = None
    if len(dims) == 4 and all(d is not None for d in dims[1:]):
        out_dims = sess.get_outputs()[0].shape
        k = out_dims[-1] if out_dims and isinstance(out_dims[-1], int) else None
        base = InputSpec(dims[1], dims[2], dims[3], k or 2)
        if k is None and opts.num_classes is None:
            raise DpconvertError(f"{source}: the output class dimension is symbolic", fix="give `num_classes`", param="num_classes")
    spec = _spec_from(base, opts, source)
    warnings = []
    assumed = None
    if opts.mean is None and opts.std is None:
        assumed = "ONNX teacher: " + NORMALISATION_UNKNOWN
        warnings.append(assumed)
    name = inp.name

    def forward(x):
        arr = x.detach().cpu().numpy().astype(np.float32, copy=False)
        return torch.from_numpy(sess.run(None, {name: arr})[0]).float()

    if dims and dims[0] is not None:  # exported with a static batch size
        forward = fixed_batch(forward, dims[0])

    from dpconvert.io.weights_hash import onnx_weights_sha256
    from dpconvert.zoo_cards import model_sha256
    from dpconvert.zoo_cards.onnx_meta import load_onnx

    proto = load_onnx(str(path))
    return Teacher(forward, spec, "onnx", source, f"ONNX model {path.name} (black box, onnxruntime)", file_sha256(path), "onnx", None, None, warnings,
                   weights_sha256=onnx_weights_sha256(proto), graph_sha256=model_sha256(proto), normalisation_assumed=assumed)


def _ort_providers(device: str) -> list[str]:
    import onnxruntime as ort

    if device.startswith("cuda") and "CUDAExecutionProvider" in ort.get_available_providers():
        return ["CUDAExecutionProvider", "CPUExecutionProvider"]
    return ["CPUExecutionProvider"]


# ---------------------------------------------------------------- .pt2 (torch.export)
@_loader("torch.export", _suffix(".pt2"))
def load_exported(source: str, opts: LoadOptions) -> Teacher:
    import torch

    path = _require_file(source)
    try:
        program = torch.export.load(str(path))
    except Exception as e:
        raise DpconvertError(f"{source}: not a torch.export program ({str(e).splitlines()[0][:160]})", fix="save it with torch.export.save") from None
    module = program.module()
    base = None
    args = program.example_inputs[0] if program.example_inputs else ()
    if args and getattr(args[0], "ndim", 0) == 4:
        k = opts.num_classes or _try_classes(module, args[0])
        base = InputSpec(*args[0].shape[1:], k or 2)
    forward = _torch_forward(module, opts.device)
    if args and getattr(args[0], "ndim", 0) == 4 and not _accepts_batch(forward, args[0], args[0].shape[0] + 1):
        forward = fixed_batch(forward, int(args[0].shape[0]))
    return Teacher(forward, _spec_from(base, opts, source), "torch.export", source,
                   f"torch.export program {path.name}", file_sha256(path), "torch.export", _num_params(module), module,
                   _normalisation_warnings(False, opts))


def _accepts_batch(forward, example, batch: int) -> bool:
    import torch

    try:
        forward(torch.zeros(batch, *example.shape[1:], dtype=example.dtype))
        return True
    except Exception:
        return False


def fixed_batch(forward: Callable, batch: int) -> Callable:
    """Run a model exported with a static batch size on any batch: chunk, pad the last chunk."""
    import torch

    def run(x):
        outs = []
        for chunk in x.split(batch):
            n = chunk.shape[0]
            if n < batch:
                chunk = torch.cat([chunk, chunk.new_zeros(batch - n, *chunk.shape[1:])])
            outs.append(forward(chunk)[:n])
        return torch.cat(outs)

    return run


def _try_classes(module, example) -> Optional[int]:
    import torch

    with torch.inference_mode():
        out = module(example)
    return int(out.shape[-1]) if isinstance(out, torch.Tensor) and out.ndim == 2 else None


# ---------------------------------------------------------------- .safetensors
@_loader("safetensors", _suffix(".safetensors"))
def load_safetensors(source: str, opts: LoadOptions) -> Teacher:
    return _load_safetensors_file(source, opts, kind="safetensors", source=source)


def _load_safetensors_file(path_str: str, opts: LoadOptions, *, kind: str, source: str) -> Teacher:
    from safetensors import SafetensorError, safe_open
    from safetensors.torch import load_file

    path = _require_file(path_str)
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
        state = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as e:
        raise DpconvertError(f"{source}: not a valid safetensors file ({str(e)[:160]})", fix="save it again with safetensors.torch.save_file") from None
    base = InputSpec.from_dict(json.loads(meta["dpconvert.input_spec"])) if "dpconvert.input_spec" in meta else None
    arch = opts.arch or meta.get("dpconvert.arch")
    return _from_state_dict(state, arch, base, opts, kind=kind, source=source, sha=file_sha256(path))


# ---------------------------------------------------------------- .pt / .pth: TorchScript, state_dict, or pickled module
def _is_torchscript(path: Path) -> bool:
    try:
        with zipfile.ZipFile(path) as z:
            return any(n.endswith("constants.pkl") or "/code/" in n for n in z.namelist())
    except (zipfile.BadZipFile, OSError):
        return False


@_loader("torch", _suffix(".pt", ".pth", ".bin", ".ckpt"))
def load_torch_file(source: str, opts: LoadOptions) -> Teacher:
    import pickle

    import torch

    path = _require_file(source)
    if _torch_checkpoint_format(path) is None:
        raise DpconvertError(f"{source}: not a PyTorch checkpoint (torch.save writes a zip archive or a pickle; this file is neither)",
                             fix="give the checkpoint itself, or a .safetensors / .onnx file")
    sha = file_sha256(path)
    if _is_torchscript(path):
        try:
            module = torch.jit.load(str(path), map_location="cpu")
        except Exception as e:
            raise DpconvertError(f"{source}: corrupt TorchScript file ({str(e).splitlines()[0][:160]})", fix="save it again with torch.jit.save") from None
        return Teacher(_torch_forward(module, opts.device), _spec_from(_answered_classes(module, opts), opts, source), "torchscript", source,
                       f"TorchScript module {path.name}", sha, "torchscript", _num_params(module), module,
                       _normalisation_warnings(False, opts))
    try:
        obj = torch.load(str(path), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        if "weights_only" not in str(e) and "Weights only" not in str(e):
            raise DpconvertError(f"{source}: corrupt checkpoint ({str(e).splitlines()[0][:160]})", fix="save it again with torch.save") from None
        if not opts.trust_pickle:
            raise DpconvertError(
                f"{source} holds a pickled Python object (a whole nn.Module); unpickling runs arbitrary code from the file",
                fix="save a state_dict instead, or pass `trust_pickle` if you trust its author", param="trust_pickle"
            ) from None
        try:
            obj = torch.load(str(path), map_location="cpu", weights_only=False)
        except Exception as e:  # noqa: BLE001 — unpickling user bytes raises anything
            raise DpconvertError(f"{source}: corrupt checkpoint ({type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''})",
                                 fix="save it again with torch.save") from None
    except (RuntimeError, EOFError, OSError, ValueError, KeyError, AttributeError, TypeError, IndexError) as e:
        raise DpconvertError(f"{source}: corrupt or unreadable checkpoint ({type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''})",
                             fix="save it again with torch.save") from None
    if isinstance(obj, torch.nn.Module):
        base, known = _module_spec(obj, opts)
        return Teacher(_torch_forward(obj, opts.device, channels_last=True), _spec_from(base, opts, source), "pickled-module", source,
                       f"pickled nn.Module {type(obj).__name__} from {path.name} (loaded with `trust_pickle`)", sha,
                       type(obj).__name__, _num_params(obj), obj,
                       ["teacher loaded by unpickling (`trust_pickle`): the file could run code"] + _normalisation_warnings(known, opts))
    state = _unwrap_state_dict(obj, source)
    return _from_state_dict(state, opts.arch, None, opts, kind="state_dict", source=source, sha=sha)


def _unwrap_state_dict(obj, source: str) -> dict:
    import torch

    if isinstance(obj, dict):
        for key in ("state_dict", "model_state_dict", "model", "module"):
            if key in obj and isinstance(obj[key], dict):
                obj = obj[key]
                break
    if not isinstance(obj, dict) or not obj or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise DpconvertError(f"{source}: expected a state_dict (a dict of tensors)", fix="save one with torch.save(model.state_dict(), path)")
    prefix = "module."
    if all(k.startswith(prefix) for k in obj):
        obj = {k[len(prefix):]: v for k, v in obj.items()}
    return obj


def _from_state_dict(state: dict, arch: Optional[str], base: Optional[InputSpec], opts: LoadOptions, *, kind: str, source: str, sha: str) -> Teacher:
    from dpconvert.students import STUDENTS, create_student

    notes = []
    if arch and not arch.startswith("timm:") and arch not in STUDENTS and _is_timm_name(arch):
        arch = f"timm:{arch}"  # `--arch resnet34`: no student has that name, timm has
    if not arch:
        arch = _recognised_arch(state, source)
        notes.append(f"architecture {arch} recognised from the checkpoint's keys and shapes (give `arch` to choose another)")
    known = base is not None
    if arch.startswith("timm:"):
        if base is None:  # nothing in the file says the input: timm's config for the architecture does
            base, known = _timm_base(arch[5:], state)
            if base is not None and opts.input_size is None:  # the size it was trained at is nowhere in the file
                notes.append(f"input size {base.channels}x{base.height}x{base.width} taken from timm's {arch[5:]} config (the file does "
                             "not say); give `input_size` if the model was trained at another size (e.g. 3,32,32 for CIFAR)")
            if known and opts.mean is None:
                notes.append(f"input normalisation taken from timm's {arch[5:]} config (mean {list(base.mean)}, std {list(base.std)}); "
                             "pass `mean`/`std` if the model was trained with other values")
    elif arch not in STUDENTS:
        raise STUDENTS.unknown(arch, otherwise=", or `arch` timm:NAME", param="arch")
    spec = _spec_from(base, opts, source)
    module = create_student(arch, spec)
    missing, unexpected = [], []
    try:
        result = module.load_state_dict(state, strict=False)
        missing, unexpected = list(result.missing_keys), list(result.unexpected_keys)
    except RuntimeError as e:
        raise DpconvertError(
            f"{source}: weights do not fit `arch` {arch} ({_first_mismatch(str(e))})", fix="check `arch`, `num_classes` and `in_chans`/`input_size`", param="arch"
        ) from None
    if missing or unexpected:
        raise DpconvertError(
            f"{source}: weights do not fit `arch` {arch} (missing {missing[:3]}, unexpected {unexpected[:3]})", fix="check `arch`", param="arch"
        )
    return Teacher(_torch_forward(module, opts.device, channels_last=True), spec, kind, source,
                   f"{arch} from {Path(source).name if not source.startswith('builtin:') else source} ({kind})", sha, arch, _num_params(module), module,
                   notes + _normalisation_warnings(known, opts))


def _is_timm_name(name: str) -> bool:
    import timm

    return timm.is_model(name.split(".")[0])


def _recognised_arch(state: dict, source: str) -> str:
    """The one timm architecture whose keys and shapes the weights have, or an error that says what to type."""
    from dpconvert.io.arch_guess import close_families, guess_timm_arch
    from dpconvert.students import STUDENTS

    found = guess_timm_arch(state)
    if len(found) == 1:
        return f"timm:{found[0]}"
    if found:
        raise DpconvertError(f"{source} holds weights only and fits several timm architectures",
                             fix="choose one: " + " or ".join(f"`arch` timm:{n}" for n in found), param="arch")
    close = close_families(state)
    hint = f" (did you mean `arch` timm:{close[0]}?)" if close else ""
    raise DpconvertError(f"{source} holds weights only and no common timm architecture has exactly its keys and shapes{hint}",
                         fix=f"name it with `arch` timm:NAME or `arch` one of: {', '.join(STUDENTS.names())}", param="arch")


def _timm_base(name: str, state: dict) -> tuple[Optional[InputSpec], bool]:
    """(input spec, whether its normalisation is known): timm's config gives the input size and normalisation, the
    weights themselves the class count and input channels (their classifier and first convolution). A config for
    other channels than the weights' says nothing about their normalisation (mean 0, std 1 and a warning)."""
    import timm

    from dpconvert.io.arch_guess import first_conv_channels, head_classes

    if not _is_timm_name(name):
        return None, False
    cfg = timm.get_pretrained_cfg(name) or timm.get_pretrained_cfg(name.split(".")[0])
    if cfg is None or not cfg.input_size:
        return None, False
    family = name.split(".")[0]
    channels = first_conv_channels(state, family) or cfg.input_size[0]
    classes = head_classes(state, family) or cfg.num_classes or 1000
    if channels != len(cfg.mean):
        return InputSpec(channels, cfg.input_size[1], cfg.input_size[2], classes, (0.0,) * channels, (1.0,) * channels), False
    return InputSpec(channels, cfg.input_size[1], cfg.input_size[2], classes, tuple(cfg.mean), tuple(cfg.std)), True


def _first_mismatch(text: str) -> str:
    for line in text.splitlines():
        if "size mismatch" in line:
            return line.strip()[:200]
    return text.splitlines()[0][:200]


def load_teacher(source: str, options: Optional[LoadOptions] = None, *, check: bool = True) -> Teacher:
    """Load a teacher from a file, ``timm:NAME`` or ``builtin:NAME``; verify it on a dummy batch."""
    opts = options or LoadOptions()
    for name in _ORDER:
        claims, load = LOADERS.get(name)
        if claims(source):
            teacher = load(source, opts)
            if teacher.weights_sha256 is None and teacher.module is not None:
                from dpconvert.io.weights_hash import module_weights_sha256

                teacher.weights_sha256 = module_weights_sha256(teacher.module)
            return check_teacher(teacher) if check else teacher
    p = Path(source)
    if not p.exists():
        raise DpconvertError(f"{source}: no such file", fix="give a teacher file, timm:NAME or builtin:digits")
    raise DpconvertError(
        f"{source}: unknown teacher format {p.suffix or '(no suffix)'!r}", fix="give a .pt/.pth (state_dict, TorchScript), "
        ".pt2 (torch.export), .safetensors or .onnx file, timm:NAME or builtin:NAME"
    )
