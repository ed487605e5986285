"""Type stubs of the native module (python/src/*.rs). Use the ``mechlab`` package's
functions instead: they wrap these with defaults, progress bars and parsing."""

import os
from typing import Any, Callable, Dict, List, Optional, Tuple, Union, final

import numpy as np
from typing_extensions import TypeAlias

__all__ = [
    "__version__",
    "presets",
    "config_json",
    "read_config_json",
    "read_summary_json",
    "metrics",
    "steps",
    "checkpoint",
    "export_model",
    "transformer_lens_state",
    "attention_html",
    "encode_text",
    "token_pieces",
    "decode_ids",
    "run",
    "resume",
    "run_dir",
    "sweep",
    "reproduce",
    "Model",
    "load_model",
    "intervene",
    "measure",
    "Tokenizer",
    "load_pretrained",
]

__version__: str

# Private aliases: stubtest checks every public name against the module.
_Overrides: TypeAlias = Optional[Dict[str, Any]]
_OnProgress: TypeAlias = Optional[Callable[[int, int, str], None]]
_PathLike: TypeAlias = Union[str, "os.PathLike[str]"]
_Generator: TypeAlias = Optional[Callable[[int], Tuple[np.ndarray, Optional[np.ndarray]]]]
_Patterns: TypeAlias = Optional[Callable[[np.ndarray], List[Tuple[str, np.ndarray]]]]

def presets() -> List[str]: ...
def config_json(source: str, overrides: _Overrides = None, seed: Optional[int] = None) -> str: ...
def read_config_json(dir: _PathLike) -> str: ...
def read_summary_json(dir: _PathLike) -> Optional[str]: ...
def metrics(dir: _PathLike, event: str) -> Dict[str, np.ndarray]: ...
def steps(dir: _PathLike) -> List[int]: ...
def checkpoint(dir: _PathLike, step: Optional[int] = None) -> Tuple[Dict[str, np.ndarray], int]: ...
def export_model(dir: _PathLike, out: _PathLike, format: str, step: Optional[int] = None) -> List[str]: ...
def transformer_lens_state(dir: _PathLike, step: Optional[int] = None) -> Tuple[Dict[str, np.ndarray], str]: ...
def encode_text(path: _PathLike, text: str) -> Tuple[List[int], List[str]]: ...
def decode_ids(path: _PathLike, ids: List[int]) -> str: ...
def token_pieces(path: _PathLike, ids: List[int]) -> List[Optional[str]]: ...
def attention_html(tokens: List[str], pattern: np.ndarray, heads: List[str], title: str, n: int) -> str: ...
def run(
    source: str,
    *,
    seed: Optional[int] = None,
    overrides: _Overrides = None,
    out: Optional[_PathLike] = None,
    command: Optional[str] = None,
    on_progress: _OnProgress = None,
    generator: _Generator = None,
    patterns: _Patterns = None,
) -> str: ...
def resume(dir: _PathLike, *, on_progress: _OnProgress = None, generator: _Generator = None) -> str: ...
def run_dir(
    source: str,
    *,
    seed: Optional[int] = None,
    overrides: _Overrides = None,
    out: Optional[_PathLike] = None,
) -> str: ...
def sweep(
    source: str,
    grid: Dict[str, Any],
    seeds: List[int],
    *,
    overrides: _Overrides = None,
    out: _PathLike,
    jobs: Optional[int] = None,
    shard: Optional[Tuple[int, int]] = None,
    replace: bool = False,
    command: Optional[str] = None,
    on_progress: _OnProgress = None,
) -> str: ...
def reproduce(
    papers: List[str],
    out: _PathLike,
    *,
    command: Optional[str] = None,
    on_progress: _OnProgress = None,
    jobs: Optional[int] = None,
    seeds: Optional[int] = None,
) -> Tuple[List[Dict[str, Any]], str]: ...

@final
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
    def attribute_cells(
        self, clean: np.ndarray, corrupted: np.ndarray, names: List[str], dout: Callable[[np.ndarray], np.ndarray]
    ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]: ...
    def run_patched(
        self,
        tokens: np.ndarray,
        name: str,
        patch: np.ndarray,
        cells: List[Tuple[Optional[List[int]], Optional[List[int]]]],
        metric: Callable[[np.ndarray], float],
    ) -> List[float]: ...
    def run_with_grads(
        self, tokens: np.ndarray, names: List[str], dout: Callable[[np.ndarray], np.ndarray]
    ) -> Tuple[np.ndarray, Dict[str, np.ndarray], Dict[str, np.ndarray]]: ...
    def run_hooked(
        self,
        tokens: np.ndarray,
        hooks: List[Dict[str, Any]],
        names: List[str],
        targets: Optional[np.ndarray] = None,
    ) -> Tuple[np.ndarray, Dict[str, np.ndarray]]: ...

def load_model(dir: _PathLike, step: Optional[int] = None) -> Model: ...
def intervene(
    dir: _PathLike, step: Optional[int] = None, ablate: Optional[List[str]] = None, patch: bool = False
) -> str: ...
def measure(dir: _PathLike, step: Optional[int] = None) -> str: ...

@final
class Tokenizer:
    pad_token_id: int
    vocab_size: int
    n_ctx: int
    def encode(self, texts: List[str]) -> Tuple[np.ndarray, List[List[str]]]: ...
    def id_to_token(self, id: int) -> Optional[str]: ...

def load_pretrained(path: str) -> Tuple[Model, Tokenizer, str]: ...
