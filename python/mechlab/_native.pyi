"""Type stubs of the native module (python/src/*.rs). Use the ``mechlab`` package's
functions instead: they wrap these with defaults, progress bars and parsing."""

import os
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import numpy as np

__version__: str

Overrides = Optional[Dict[str, Any]]
OnProgress = Optional[Callable[[int, int, str], None]]
PathLike = Union[str, "os.PathLike[str]"]

def presets() -> List[str]: ...
def config_json(source: str, overrides: Overrides = None, seed: Optional[int] = None) -> str: ...
def read_config_json(dir: PathLike) -> str: ...
def read_summary_json(dir: PathLike) -> Optional[str]: ...
def metrics(dir: PathLike, event: str) -> Dict[str, np.ndarray]: ...
def steps(dir: PathLike) -> List[int]: ...
def checkpoint(dir: PathLike, step: Optional[int] = None) -> Tuple[Dict[str, np.ndarray], int]: ...
def run(
    source: str,
    *,
    seed: Optional[int] = None,
    overrides: Overrides = None,
    out: Optional[PathLike] = None,
    command: Optional[str] = None,
    on_progress: OnProgress = None,
) -> str: ...
def resume(dir: PathLike, *, on_progress: OnProgress = None) -> str: ...
def sweep(
    source: str,
    grid: Dict[str, Any],
    seeds: List[int],
    *,
    overrides: Overrides = None,
    out: PathLike,
    jobs: Optional[int] = None,
    shard: Optional[Tuple[int, int]] = None,
    replace: bool = False,
    command: Optional[str] = None,
    on_progress: OnProgress = None,
) -> str: ...
def reproduce(
    papers: List[str],
    out: PathLike,
    *,
    command: Optional[str] = None,
    on_progress: OnProgress = None,
) -> List[Dict[str, Any]]: ...

class Model:
    step: int
    def hook_points(self) -> List[Dict[str, str]]: ...
    def output_layout(self) -> str: ...
    def run_with_cache(
        self, tokens: np.ndarray, names: List[str], targets: Optional[np.ndarray] = None
    ) -> Tuple[np.ndarray, Dict[str, np.ndarray]]: ...
    def run_with_hooks(
        self, tokens: np.ndarray, hooks: List[Dict[str, Any]], targets: Optional[np.ndarray] = None
    ) -> np.ndarray: ...

def load_model(dir: PathLike, step: Optional[int] = None) -> Model: ...
