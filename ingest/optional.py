"""Optional dependencies: imported where their path is taken, a clear error where they are absent."""

import importlib
import sys

from .errors import ConfigError

__all__ = ["require"]


def require(module, package, extra):
    """Import ``module``; when it is not installed, a ``ConfigError`` naming ``package`` and the extra of
    ingest that installs it (``pip install 'ingest[extra]'``)."""
    loaded = sys.modules.get(module)  # per batch on some paths (to_kjt): import_module's own lookup costs microseconds
    if loaded is not None:
        return loaded
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ConfigError(
            f"this needs the package {package!r}, which is not installed: "
            f"pip install 'ingest[{extra}]' (or pip install {package})"
        ) from exc
    except OSError as exc:  # installed, but a native library of it does not load
        hint = ""
        if "fbgemm" in str(exc):
            hint = (
                "; torchrec's fbgemm-gpu needs CUDA, on a CPU machine: "
                "pip install --no-deps --force-reinstall fbgemm-gpu-cpu==1.9.0"
            )
        raise ConfigError(f"{package!r} is installed but does not load: {exc}{hint}") from exc
