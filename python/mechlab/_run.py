"""A run folder, read from Python: config, summary, metrics, checkpoints."""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Union, cast

import numpy as np

from . import _native
from ._errors import RunFolderError

if TYPE_CHECKING:
    from ._model import Model

PathLike = Union[str, "os.PathLike[str]"]


class Run:
    """A run folder (``runs/<preset>-s<seed>/``) and what it recorded.

    Every attribute reads the folder's files through the same Rust code the CLI
    uses; nothing is cached but the config and the summary.
    """

    def __init__(self, run_dir: PathLike) -> None:
        self.dir = Path(run_dir)
        # Fails now, with RunFolderError, on a folder that is not a run.
        self._config: Dict[str, Any] = json.loads(_native.read_config_json(self.dir))
        self._summary: Optional[Dict[str, Any]] = None

    def __repr__(self) -> str:
        return f"Run({str(self.dir)!r})"

    @property
    def config(self) -> Dict[str, Any]:
        """The resolved config (every key), as saved in ``config.toml``."""
        return self._config

    def _read_summary(self) -> Optional[Dict[str, Any]]:
        if self._summary is None:
            text = _native.read_summary_json(self.dir)
            if text is None:
                return None
            self._summary = json.loads(text)
        return self._summary

    @property
    def finished(self) -> bool:
        """Whether the run has finished (it has a ``summary.json``)."""
        return self._read_summary() is not None

    @property
    def summary(self) -> Dict[str, Any]:
        """``summary.json``: ``{"experiment", "seed", "metrics", "verdicts",
        "measurements"}``. A run that has not finished (interrupted: see
        ``resume``; check ``finished``) has none and raises RunFolderError."""
        s = self._read_summary()
        if s is None:
            raise RunFolderError(
                f"{self.dir}: no summary.json, the run has not finished "
                f"(continue it with mechlab.resume({str(self.dir)!r}))"
            )
        return s

    @property
    def verdicts(self) -> List[Dict[str, Any]]:
        """One dict per claim: ``id``, ``claim``, ``prediction``, ``source`` (where
        the prediction comes from), ``measured``, ``pass``; empty for a run that
        has not finished."""
        s = self._read_summary()
        return [] if s is None else list(s["verdicts"])

    def metrics(self, event: str = "train") -> Any:
        """The ``event`` records of ``metrics.jsonl`` (``train``: loss, lr and
        gradient norms; ``probe``: the mechanism's measurements), one row per
        record: a ``pandas.DataFrame`` when pandas is installed, else a dict of
        numpy columns. ``step`` is int64, every other column float64 (NaN where
        a record lacks it)."""
        cols = _native.metrics(self.dir, event)
        try:
            import pandas as pd
        except ImportError:
            return cols
        return pd.DataFrame(cols)

    def steps(self) -> List[int]:
        """The steps that have a checkpoint, ascending."""
        return _native.steps(self.dir)

    def checkpoint(self, step: Optional[int] = None) -> Dict[str, np.ndarray]:
        """The model's parameters at checkpoint ``step`` (the latest by default),
        by parameter name, in the run's dtype (float32 or float64)."""
        params, _ = _native.checkpoint(self.dir, step)
        return params

    def model(self, step: Optional[int] = None) -> "Model":
        """The run's model with the weights of checkpoint ``step`` (the latest by
        default): ``hook_points()``, ``run_with_cache``, ``run_with_hooks``."""
        from ._model import Model

        return Model(_native.load_model(self.dir, step), self.dir)

    def measure(self, step: Optional[int] = None) -> Dict[str, float]:
        """What the run's experiment measures at a probe step, on checkpoint
        ``step`` (the latest by default): for a ``transformer`` run the same keys
        as ``metrics("probe")`` (loss, detectors, composition, lens), as
        ``mechlab measure`` prints them."""
        d = json.loads(_native.measure(self.dir, step))
        return {k: float(v) for k, v in d["values"].items()}

    def export_transformer_lens(self, out: Optional[PathLike] = None, step: Optional[int] = None) -> Path:
        """Writes the run's transformer (checkpoint ``step``, the latest by
        default) as TransformerLens's ``HookedTransformer`` state dict and config
        into ``out`` (default ``<run>/export/transformer_lens``): load it with
        ``HookedTransformer(HookedTransformerConfig(**json.load(open(out / "config.json"))))``
        and ``load_state_dict(safetensors.torch.load_file(out / "model.safetensors"), strict=False)``;
        ``mechlab.train(init_from=out)`` starts a run from it. Returns ``out``."""
        target = Path(out) if out is not None else Path(self.dir) / "export" / "transformer_lens"
        _native.export_model(self.dir, target, "transformer_lens", step)
        return target

    def export_nanogpt(self, out: Optional[PathLike] = None, step: Optional[int] = None) -> Path:
        """Writes the run's transformer as karpathy/nanoGPT's ``GPT`` state dict
        (``model.safetensors``) and ``GPTConfig`` keys (``config.json``) into
        ``out`` (default ``<run>/export/nanogpt``): ``GPT(GPTConfig(**cfg))`` and
        ``load_state_dict(...)``. Only a model nanoGPT can hold exports (LayerNorm,
        ``d_mlp = 4·d_model``, ``act_fn = "gelu"``, tied embeddings, no unembedding
        bias); ``mechlab.train(init_from=out)`` imports one. Returns ``out``."""
        target = Path(out) if out is not None else Path(self.dir) / "export" / "nanogpt"
        _native.export_model(self.dir, target, "nanogpt", step)
        return target

    def intervene(
        self,
        step: Optional[int] = None,
        ablate: Optional[List[str]] = None,
        patch: bool = False,
    ) -> Dict[str, Any]:
        """The paper's causal questions on this run, as ``mechlab intervene``
        answers them: ``effects`` (each a metric ``clean``, ``intervened`` and
        ``control``), then the paper's own tables. Also writes
        ``intervene.json``, its figures and the report's "Interventions" section.
        ``ablate`` (zero, mean, resample) and ``patch`` are induction's; another
        paper refuses them with a ``ConfigError`` naming what it runs."""
        return cast(Dict[str, Any], json.loads(_native.intervene(self.dir, step, ablate, patch)))


class Sweep:
    """A sweep folder: ``index.csv`` (one row per run), ``summary.csv`` (mean,
    std, min, max per grid point and metric) and the runs under ``runs/``."""

    def __init__(self, sweep_dir: PathLike) -> None:
        self.dir = Path(sweep_dir)

    def __repr__(self) -> str:
        return f"Sweep({str(self.dir)!r})"

    def _table(self, name: str) -> Any:
        path = self.dir / name
        try:
            import pandas as pd
        except ImportError:
            import csv

            with open(path, newline="") as f:
                return [{k: _number(v) for k, v in row.items()} for row in csv.DictReader(f)]
        return pd.read_csv(path)

    def index(self) -> Any:
        """``index.csv``: a DataFrame with pandas, else a list of row dicts."""
        return self._table("index.csv")

    def summary(self) -> Any:
        """``summary.csv``: a DataFrame with pandas, else a list of row dicts."""
        return self._table("summary.csv")

    def runs(self) -> List[Run]:
        """The sweep's runs in plan order (grid points, first key slowest, then
        seeds), as ``sweep.json`` records them; runs not started yet are left
        out, and so is anything else under ``runs/``. A folder from before
        ``sweep.json`` existed falls back to ``index.csv``."""
        plan_path = self.dir / "sweep.json"
        if plan_path.is_file():
            plan = json.loads(plan_path.read_text())
            values = [vals for _, vals in plan["grid"]]
            names = [
                f"p{point}-s{seed}"
                for point, _ in enumerate(itertools.product(*values))
                for seed in plan["seeds"]
            ]
            shard = plan.get("shard")
            if shard is not None:
                names = [n for i, n in enumerate(names) if i % shard[1] == shard[0]]
        else:
            import csv

            with open(self.dir / "index.csv", newline="") as f:
                names = [row["run"] for row in csv.DictReader(f)]
        root = self.dir / "runs"
        return [Run(root / n) for n in names if (root / n / "config.toml").is_file()]


def _number(text: str) -> Any:
    """A CSV cell as pandas would read it: an int, a float (NaN for empty), or
    the text itself."""
    if text == "":
        return float("nan")
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text
