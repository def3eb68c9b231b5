"""proctor: evaluate LLMs locally or hosted, and land every sample on one platform."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("proctor")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0.0.0"

__all__ = ["__version__"]
