"""The probe catalog: which symbol in which library means what.

Each probe becomes one generated BPF function with a compile-time id, so a hit
costs a map update and no lookup. See docs/probe-notes.md for why each
symbol was chosen (and why uretprobes are never put on C++ functions).
"""

from __future__ import annotations

import dataclasses
import os
import re

from ..vocab import CAT_BACKEND, CAT_CUDA, CAT_PY, CAT_SIM, CATEGORIES  # noqa: F401 - the specs' words

# Probe kinds.
ENTER = "enter"          # entry uprobe: category depth +1 (begin of a begin/end bracket)
EXIT = "exit"            # entry uprobe on the end function: depth -1
PAIR = "pair"            # uprobe + uretprobe on a C-ABI function
RANGE_BEGIN = "range_begin"  # named range opens (record_function)
RANGE_END = "range_end"
COUNT = "count"          # entry uprobe that only counts

MAX_PROBES = 50
ALWAYS_ON = (COUNT, RANGE_BEGIN, RANGE_END)   # no category step removes these: the budget stops them by lever


@dataclasses.dataclass(frozen=True)
class ProbeSpec:
    """One probe point: a symbol in a library, and what a hit means."""

    group: str       # probe set shown to the user: torch, cudart, cuda-driver, mujoco, sim:<lib>
    lib_re: str      # matched against the basename of a mapped file
    symbol: str      # exact symbol name (bare, no @version)
    category: int
    kind: str
    label: str       # short name for tables
    sym_re: bool = False   # `symbol` is a regex (anchored) resolved against the library at attach
    part: str = ""         # "wait": a JAX wait bracket (see probes/frameworks.py)
    any_lib: bool = False  # also in any mapped library that defines `symbol` (a static copy, see
                           # probes/static_copies.py), once the target has run that copy

    def matches(self, path: str) -> bool:
        """Whether a mapped file path belongs to this probe's library."""
        return re.search(self.lib_re, os.path.basename(path)) is not None

    def fn_names(self, pid_: int) -> tuple[str, ...]:
        """Names of the generated BPF functions for this probe id."""
        if self.kind == PAIR:
            return (f"p{pid_}_enter", f"p{pid_}_exit")
        return (f"p{pid_}_{self.kind}",)

    @property
    def lever(self) -> str:
        """The name the budget stops an always-on probe by (a range's two ends go together)."""
        return f"{self.group} ranges" if self.kind in (RANGE_BEGIN, RANGE_END) else self.label

    @property
    def n_attach(self) -> int:
        """Kernel probes this spec costs."""
        return 2 if self.kind == PAIR else 1


_TORCH_PY = r"^libtorch_python\.so"
_TORCH_CPU = r"^libtorch_cpu\.so"
_CUDART = r"^libcudart\.so"
_CUDA = r"^libcuda\.so"
_MUJOCO = r"^libmujoco\.so"

TORCH = [
    ProbeSpec("torch", _TORCH_PY, "_ZN5torch16PyWarningHandlerC1Ev", CAT_BACKEND, ENTER, "op begin"),
    ProbeSpec("torch", _TORCH_PY, "_ZN5torch16PyWarningHandlerD1Ev", CAT_BACKEND, EXIT, "op end"),
    ProbeSpec("torch", _TORCH_CPU,
              "_ZN5torch8autograd6Engine7executeERKSt6vectorINS0_4EdgeESaIS3_EERKS2_IN2at6TensorESaIS9_EEbbbS7_",
              CAT_BACKEND, COUNT, "autograd backward"),
    ProbeSpec("torch", _TORCH_CPU,
              "_ZN5torch8autograd8profiler25record_function_enter_newERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEERKSt8optionalIS7_E",
              CAT_BACKEND, RANGE_BEGIN, "record_function"),
    ProbeSpec("torch", _TORCH_CPU,
              "_ZN5torch8autograd8profilerL24record_function_exit_newERKN3c1013intrusive_ptrINS1_20PythonRecordFunctionENS2_6detail34intrusive_target_default_null_typeIS4_EEEE",
              CAT_BACKEND, RANGE_END, "record_function end"),
]

# libcudart 13 exports bare names. The _ptsz variants are for per-thread default
# stream builds, which frameworks do not use; they stay out to keep detach fast.
CUDART = [ProbeSpec("cudart", _CUDART, s, CAT_CUDA, PAIR, s) for s in (
    "cudaLaunchKernel", "cudaLaunchKernelExC", "cudaMemcpyAsync", "cudaMemcpy",
    "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
    "cudaMalloc", "cudaFree", "cudaGraphLaunch",
)]

CUDA_DRIVER = [ProbeSpec("cuda-driver", _CUDA, s, CAT_CUDA, PAIR, s) for s in (
    "cuLaunchKernel", "cuLaunchKernelEx", "cuStreamSynchronize", "cuCtxSynchronize",
    "cuGraphLaunch",
)]

# Simulator engines with no probe set of their own: a thread the CPU-clock tick finds running in
# their code is running the simulator (envpool's C++ engines step their envs on worker threads;
# classic_control_envpool.so's CartPole has no entry point worth a probe).
SIM_ENGINE_LIB = re.compile(r"_envpool\.so$")

# any_lib: envpool links MuJoCo statically into its modules (mujoco_gym_envpool.so, ...).
MUJOCO = [ProbeSpec("mujoco", _MUJOCO, s, CAT_SIM, PAIR, s, any_lib=True) for s in (
    "mj_step", "mj_step1", "mj_step2", "mj_forward", "mj_resetData",
)]


# Calls in which a thread waits for the GPU: their time is a lower bound of GPU-bound
# time (probes/sync_timing.c times the outermost one per thread).
SYNC_SYMBOLS = frozenset({"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
                          "cuStreamSynchronize", "cuCtxSynchronize"})

_TF_PY = r"^lib_pywrap_tensorflow_common\.so"
_TF_CC = r"^libtensorflow_cc\.so"
_JAX = r"^libjax_common\.so"

# TensorFlow 2.21 (docs/probe-notes.md). The TFE_Py_* functions report every error through a
# TSL_Status or a Python exception and return normally (the pybind11 wrapper throws after
# they return), and TF_SessionRun is plain C: return probes on them are exception-safe.
# TFE_Execute is left out: every Python entry reaches it through one of these (nested).
# absl's versioned namespace (lts_YYYYMMDD) changes between builds: match it by regex.
TENSORFLOW = [
    ProbeSpec("tensorflow", _TF_PY, "_Z24TFE_Py_FastPathExecute_CP7_object", CAT_BACKEND, PAIR, "tf eager op"),
    ProbeSpec("tensorflow", _TF_PY,
              r"^_Z24TFE_Py_ExecuteCancelableP11TFE_ContextPKcS2_PN4absl12lts_[0-9]+13InlinedVector.*$",
              CAT_BACKEND, PAIR, "tf execute (slow path, tf.function)", sym_re=True),
    ProbeSpec("tensorflow", _TF_PY, "_Z19TFE_Py_TapeGradientP7_objectS0_S0_S0_S0_S0_P10TSL_Status",
              CAT_BACKEND, PAIR, "tf tape gradient"),
    ProbeSpec("tensorflow", _TF_CC, "TF_SessionRun", CAT_BACKEND, PAIR, "tf session run"),
]

# JAX/XLA (jaxlib 0.10.2 CPU; local .symtab symbols). Dispatch: the jitted-call slot
# function, called by CPython, catches jaxlib's exceptions itself (one escaping it would
# kill the process with or without us). Waits: PyArray::BlockUntilReady can throw (Ctrl-C
# while waiting), so no return probe there: it opens a bracket with an entry probe and the
# UserContextScope destructor, which runs on return and on unwinding, closes it (a guarded
# exit that closes only an open wait; see probes/frameworks.py).
JAX = [
    ProbeSpec("jax", _JAX, "PjitFunction_tp_vectorcall", CAT_BACKEND, PAIR, "jax jitted call"),
    # The wait end goes before the wait entries: they attach only once it is in place.
    ProbeSpec("jax", _JAX, "_ZN3xla4ifrt16UserContextScopeD2Ev", CAT_BACKEND, EXIT, "jax wait end",
              part="wait"),
    ProbeSpec("jax", _JAX, "_ZNK3jax7PyArray15BlockUntilReadyEv", CAT_BACKEND, ENTER,
              "jax block_until_ready", part="wait"),
    ProbeSpec("jax", _JAX, "_ZN3jax7PyArray22BatchedBlockUntilReadyESt6vectorIN8nanobind6objectESaIS3_EE",
              CAT_BACKEND, ENTER, "jax batched block_until_ready", part="wait"),
    # np.asarray(array) reads it through the buffer protocol, which waits for it: SBX's PPO waits
    # here, not in block_until_ready (12% of its wall time read as Python off-CPU). A C slot
    # that CPython calls (no exception escapes it), so a pair, which closes its own bracket.
    ProbeSpec("jax", _JAX, "_ZN3jax12_GLOBAL__N_120PyArray_bf_getbufferEP7_objectP9Py_bufferi", CAT_BACKEND, PAIR,
              "jax array to numpy", part="wait"),
]


# Box2D 2.3.10 (pybox2d, gymnasium's LunarLander and BipedalWalker): the SWIG wrapper of
# b2World::Step, a C function CPython calls (a local .symtab symbol). b2World::Step itself is
# C++ and runs Python contact listeners (SWIG directors) that may raise through it; the
# wrapper is where such an exception is caught or ends the process with or without us, so
# its return probe is safe. Python inside a listener counts as Simulator.
BOX2D = [ProbeSpec("box2d", r"^_Box2D\.", "_wrap_b2World_Step", CAT_SIM, PAIR, "b2World.Step")]


def builtin() -> list[ProbeSpec]:
    """All built-in probes, in id order (new sets go last so existing ids stay)."""
    return TORCH + CUDART + CUDA_DRIVER + MUJOCO + TENSORFLOW + JAX + BOX2D


def groups() -> list[str]:
    """The built-in probe sets' names, in catalog order."""
    return list(dict.fromkeys(s.group for s in builtin()))


def category_of_group(group: str) -> str | None:
    """The category a probe set's specs declare (``sim:<lib>`` sets: simulator), or None
    for a set the catalog does not know."""
    if group.startswith("sim:"):
        return CATEGORIES[CAT_SIM]
    cats = {s.category for s in builtin() if s.group == group}
    return CATEGORIES[cats.pop()] if len(cats) == 1 else None


def is_user_spec(spec: ProbeSpec) -> bool:
    """Whether a probe names a user's symbol (``--sim-lib``) rather than a catalog one."""
    return spec.group.startswith("sim:")


def sim_lib_specs(lib: str, symbols: list[str]) -> list[ProbeSpec]:
    """Probes for a user-named simulator library (``--sim-lib``).

    Args:
        lib: a path or a basename (prefix) of a library the target maps.
        symbols: C-ABI entry points; each gets an entry and a return probe.
    """
    base = os.path.basename(lib)
    lib_re = "^" + re.escape(base) + (r"(\.|$)" if not re.search(r"\.so", base) else "")
    group = f"sim:{base}"
    return [ProbeSpec(group, lib_re, s, CAT_SIM, PAIR, s) for s in symbols]
