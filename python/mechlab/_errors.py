"""The exceptions mechlab raises (the native module raises them by name)."""


class MechlabError(Exception):
    """A run, sweep or file operation failed; the message names the file or key."""


class ConfigError(MechlabError, ValueError):
    """A bad preset, config file, key or value (as ``--set`` reports it)."""


class CheckpointError(MechlabError):
    """A checkpoint is missing, truncated, corrupt or does not fit the model."""


class RunFolderError(MechlabError, FileNotFoundError):
    """A folder that does not exist or is not a run (it has no ``config.toml``)."""


class VerdictError(MechlabError):
    """``reproduce(check=True)``: a claim was not borne out (or a run failed)."""


class HookError(MechlabError, ValueError):
    """An unknown hook point (the message names the closest), a bad hook or bad
    model inputs."""


class SweepFolderError(MechlabError, FileExistsError):
    """The sweep's output folder holds another sweep (the message names each
    difference) or results without a ``sweep.json``; nothing in it was touched.
    Choose another ``out`` or pass ``replace=True``."""
