"""The functions of the ``mechlab`` package: configs, runs, sweeps, reproduce."""

from __future__ import annotations

import json
import operator
import os
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from . import _native
from ._errors import ConfigError, VerdictError
from ._model import Pretrained
from ._progress import bar
from ._run import PathLike, Run, Sweep

Overrides = Optional[Dict[str, Any]]


# Argument checks at the boundary: a wrong type is a TypeError and a bad value a
# ConfigError, each naming the argument, before anything reaches the native code
# (whose conversions would raise a bare OverflowError or TypeError).


def _kind(value: Any) -> str:
    return f"{type(value).__name__} {value!r}"


def _int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"{name}: expected an int, got {_kind(value)}")
    return operator.index(value)


def _seed(value: Any, name: str = "seed") -> int:
    v = _int(value, name)
    if not 0 <= v < 2**64:
        raise ConfigError(f"{name} {v}: expected an integer from 0 to 2**64 - 1")
    return v


def _overrides(overrides: Any) -> Overrides:
    if overrides is None:
        return None
    if not isinstance(overrides, Mapping):
        raise TypeError(
            f"overrides: expected a dict of dotted keys to values, like {{'train.lr': 0.5}}, "
            f"got {type(overrides).__name__}"
        )
    return dict(overrides)


def _path(value: Any, name: str) -> Optional[Path]:
    if value is None:
        return None
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{name}: expected a path (str or os.PathLike), got {_kind(value)}")
    return Path(value)


def _required_path(value: Any, name: str) -> Path:
    path = _path(value, name)
    if path is None:
        raise TypeError(f"{name}: expected a path (str or os.PathLike), got None")
    return path


def _grid(grid: Any) -> Dict[str, List[Any]]:
    if not isinstance(grid, Mapping):
        raise TypeError(
            f"grid: expected a dict of dotted keys to lists of values, like "
            f"{{'model.d_model': [16, 32]}}, got {type(grid).__name__}"
        )
    out = {}
    for k, vals in grid.items():
        if hasattr(vals, "tolist") and not isinstance(vals, (str, bytes)):
            vals = vals.tolist()  # a numpy array of values
        if isinstance(vals, (str, bytes)) or not isinstance(vals, (list, tuple, range)):
            raise TypeError(f"grid[{k!r}]: expected a list of values, got {_kind(vals)}")
        out[k] = list(vals)
    return out


def _call(name: str, *args: Any, **kwargs: Any) -> str:
    """The Python call as text, for the header of the run's ``config.toml``."""
    parts = [repr(str(a)) if isinstance(a, os.PathLike) else repr(a) for a in args]
    parts += [f"{k}={v!r}" for k, v in kwargs.items() if v is not None]
    return f"python: mechlab.{name}({', '.join(parts)})"


def _source(preset_or_path: Union[str, "os.PathLike[str]"]) -> str:
    if not isinstance(preset_or_path, (str, os.PathLike)):
        raise TypeError(f"preset_or_path: expected a preset name or a path, got {_kind(preset_or_path)}")
    return os.fspath(preset_or_path)


def presets() -> List[str]:
    """Every preset's name, in ``mechlab list`` order."""
    return list(_native.presets())


def config(preset: Union[str, "os.PathLike[str]"], overrides: Overrides = None) -> Dict[str, Any]:
    """The resolved config of a preset or TOML file with ``overrides`` applied
    (dotted keys, type-checked as ``--set`` is; a bad one raises ConfigError)."""
    return json.loads(_native.config_json(_source(preset), _overrides(overrides)))


def run(
    preset_or_path: Union[str, "os.PathLike[str]"],
    *,
    seed: Optional[int] = None,
    overrides: Overrides = None,
    out: Optional[PathLike] = None,
    quiet: Optional[bool] = None,
) -> Run:
    """Runs a preset or config file as ``mechlab run`` does and returns the run.

    The folder is ``out`` or ``runs/<preset>-s<seed>`` (made unique). The GIL is
    released while it trains; Ctrl-C (KeyboardInterrupt) writes a checkpoint and
    stops, and ``resume(run_dir)`` continues it bit for bit.

    The progress bar (tqdm; a widget in Jupyter with ``ipywidgets``) names the
    phase and counts steps; it shows in a notebook or terminal unless
    ``quiet=True``, and never in a pipe or log (``quiet=None``, the default).
    """
    src = _source(preset_or_path)
    seed = None if seed is None else _seed(seed)
    overrides, out = _overrides(overrides), _path(out, "out")
    cmd = _call("run", src, seed=seed, overrides=overrides, out=out)
    with bar(quiet, src, "step", phases=True) as cb:
        d = _native.run(
            src, seed=seed, overrides=overrides, out=out, command=cmd, on_progress=cb
        )
    return Run(d)


def load(run_dir: PathLike) -> Run:
    """Opens an existing run folder (RunFolderError when it is not one)."""
    return Run(run_dir)


def load_pretrained(path: PathLike) -> Pretrained:
    """A pretrained BERT-family encoder from a Hugging Face folder (``config.json``,
    ``model.safetensors``, ``tokenizer.json`` or ``vocab.txt``), or by name from
    the shared models folder, as a hooked model (TransformerLens's
    ``HookedEncoder.from_pretrained``)::

        m = mechlab.load_pretrained("all-MiniLM-L6-v2")
        out, cache = m.run_with_cache("The Roman Empire", names_filter=lambda n: n.endswith("hook_pattern"))
    """
    native, tokenizer, folder = _native.load_pretrained(str(_required_path(path, "path")))
    return Pretrained(native, tokenizer, folder)


def resume(run_dir: PathLike, *, quiet: Optional[bool] = None, generator: Optional[Any] = None) -> Run:
    """Continues an interrupted run from its latest checkpoint, as ``mechlab resume``;
    its bar starts at the step it resumes from. A ``mechlab.train`` run whose
    batches came from a generator needs the same ``generator`` again."""
    path = _required_path(run_dir, "run_dir")
    call = None
    if generator is not None:
        from ._train import resume_generator

        call = resume_generator(path, generator)
    with bar(quiet, f"resume {Path(run_dir).name}", "step", phases=True) as cb:
        d = _native.resume(path, on_progress=cb, generator=call)
    return Run(d)


def _seeds(seeds: Union[str, Iterable[int]]) -> List[int]:
    if isinstance(seeds, str):
        text = seeds.strip()
        try:
            if ".." in text:
                a, b = (int(x) for x in text.split("..", 1))
                if a >= b:
                    raise ValueError
                return list(range(a, b))
            return [int(x) for x in text.split(",")]
        except ValueError:
            raise ConfigError(f"seeds {seeds!r}: expected 'a..b' or 'a,b,c'") from None
    if isinstance(seeds, bytes) or not hasattr(seeds, "__iter__"):
        raise TypeError(f"seeds: expected 'a..b', 'a,b,c' or a list of ints, got {_kind(seeds)}")
    return [_seed(s, "seeds") for s in seeds]


def sweep(
    preset_or_path: Union[str, "os.PathLike[str]"],
    grid: Dict[str, Sequence[Any]],
    *,
    seeds: Union[str, Iterable[int]] = "0..2",
    overrides: Overrides = None,
    out: Optional[PathLike] = None,
    jobs: Optional[int] = None,
    shard: Optional[Tuple[int, int]] = None,
    replace: bool = False,
    quiet: Optional[bool] = None,
) -> Sweep:
    """Runs the grid (the product of ``grid``'s value lists) times ``seeds`` in
    parallel, as ``mechlab sweep`` does, into ``out`` (default
    ``sweeps/<preset>``); a failed run is a row with its error, not an exception.

    The same sweep into the same ``out`` again continues it: finished runs are
    kept, interrupted ones resume, failed ones run again. Another sweep there
    raises :class:`SweepFolderError` naming each difference, unless ``replace``
    (which deletes the folder's sweep results first; other files stay)."""
    src = _source(preset_or_path)
    out = _path(out, "out") or Path("sweeps") / Path(src).stem
    seed_list = _seeds(seeds)
    axes, overrides = _grid(grid), _overrides(overrides)
    if jobs is not None and _int(jobs, "jobs") < 1:
        raise ConfigError(f"jobs {jobs}: expected at least 1")
    if shard is not None:
        if not isinstance(shard, (tuple, list)) or len(shard) != 2:
            raise TypeError(f"shard: expected a pair (i, n), got {_kind(shard)}")
        shard = (_int(shard[0], "shard"), _int(shard[1], "shard"))
    cmd = _call(
        "sweep", src, grid, seeds=seeds, overrides=overrides, out=out, jobs=jobs, shard=shard, replace=replace or None
    )
    with bar(quiet, f"sweep {src}", "run") as cb:
        d = _native.sweep(
            src,
            axes,
            seed_list,
            overrides=overrides,
            out=out,
            jobs=jobs,
            shard=shard,
            replace=replace,
            command=cmd,
            on_progress=cb,
        )
    return Sweep(d)


def reproduce(
    papers: Optional[Sequence[str]] = None,
    check: bool = False,
    out: Optional[PathLike] = None,
    quiet: Optional[bool] = None,
    jobs: Optional[int] = None,
    seeds: Optional[int] = None,
) -> List[Dict[str, Any]]:
    """Runs every paper's reproduce presets (or those of ``papers``: induction,
    markov-icl, selection, topic, attention-svm, lm-induction, birth) into ``out``
    (default ``runs/reproduce``) and writes the combined report there, as
    ``mechlab reproduce`` does, ``jobs`` runs at a time (default 2, or 1 on one
    core; the results do not depend on it). Each setting runs on its own number
    of seeds, or on ``seeds``, and each claim is judged over them by its rule.

    Returns one dict per run: ``paper``, ``name``, ``setting``, ``seed``, ``dir``,
    ``seconds``, ``summary`` (dict, or None when the run failed), ``error``,
    ``known_findings`` (the failed verdicts whose claim's rule allows them: the
    authors' code fails them on some seeds too) and ``run``. The claims judged
    over seeds (rate, rule, per-seed values, status) are ``claims`` in
    ``out/summary.json``. With ``check=True`` a claim that fails its rule, or a
    failed run, raises VerdictError after all ran (as ``mechlab reproduce
    --check``).
    """
    out = _path(out, "out") or Path("runs/reproduce")
    if isinstance(papers, str):
        papers = [papers]
    papers = list(papers or [])
    for p in papers:
        if not isinstance(p, str):
            raise TypeError(f"papers: expected paper names (str), got {_kind(p)}")
    if jobs is not None and _int(jobs, "jobs") < 1:
        raise ConfigError(f"jobs {jobs}: expected at least 1")
    if seeds is not None and _int(seeds, "seeds") < 1:
        raise ConfigError(f"seeds {seeds}: expected at least 1 seed per setting")
    cmd = _call("reproduce", papers, check=check or None, out=out, seeds=seeds)
    with bar(quiet, "reproduce", "run") as cb:
        raw, claims_json = _native.reproduce(
            papers, out, command=cmd, on_progress=cb, jobs=jobs, seeds=seeds
        )
    results = []
    for r in raw:
        summary = None if r["summary_json"] is None else json.loads(r["summary_json"])
        results.append(
            {
                "paper": r["paper"],
                "name": r["name"],
                "setting": r["setting"],
                "seed": r["seed"],
                "dir": Path(r["dir"]),
                "seconds": r["seconds"],
                "summary": summary,
                "error": r["error"],
                "known_findings": list(r["known_findings"]),
                "run": Run(r["dir"]) if summary is not None else None,
            }
        )
    if check:
        bad = [f"{r['name']}: error: {r['error']}" for r in results if r["error"] is not None]
        bad += [
            f"{c['id']} ({c['setting']}): {c['reason']}"
            for c in json.loads(claims_json)
            if c["status"] == "failed"
        ]
        if bad:
            raise VerdictError("claims not borne out:\n  " + "\n  ".join(bad))
    return results
