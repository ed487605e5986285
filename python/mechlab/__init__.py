"""mechlab from Python: start runs and sweeps, read their metrics and checkpoints
as numpy arrays and pandas frames.

>>> import mechlab
>>> r = mechlab.run("induction-simplified", overrides={"train.steps": 50})
>>> r.summary["metrics"]["a"]            # doctest: +SKIP
>>> r.metrics("probe")                    # a DataFrame, one row per probe step
>>> r.checkpoint()["layer2.a"]            # doctest: +SKIP

The work is done by the same Rust code as the ``mechlab`` command line (the
native module ``mechlab._native``); see docs/python.md.
"""

from ._api import config, load, load_pretrained, presets, reproduce, resume, run, sweep
from ._detect import detect_head
from ._errors import (
    CheckpointError,
    ConfigError,
    HookError,
    MechlabError,
    RunFolderError,
    SweepFolderError,
    VerdictError,
)
from ._cache import ActivationCache, act_name
from ._model import Hook, HookPoint, Model, Pretrained
from ._native import __version__
from ._run import Run, Sweep
from ._patch import LogitDiff, Loss, Metric, Patching, logit_diff
from ._train import train
from ._view import AttentionView, attention_view

__all__ = [
    "ActivationCache",
    "AttentionView",
    "CheckpointError",
    "ConfigError",
    "Hook",
    "HookError",
    "HookPoint",
    "LogitDiff",
    "Loss",
    "Metric",
    "Patching",
    "MechlabError",
    "Model",
    "Pretrained",
    "Run",
    "RunFolderError",
    "Sweep",
    "SweepFolderError",
    "VerdictError",
    "__version__",
    "act_name",
    "attention_view",
    "config",
    "detect_head",
    "load",
    "load_pretrained",
    "logit_diff",
    "presets",
    "reproduce",
    "resume",
    "run",
    "sweep",
    "train",
]
