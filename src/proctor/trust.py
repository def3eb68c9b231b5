"""One trust policy for every TLS connection proctor opens as a client.

Model calls, judge calls, the runs SDK and the hub client all verify servers against the
same certificates: the system's trust store (through `truststore`, so a corporate CA that
IT installed system-wide just works), plus the PEM bundle named by `SSL_CERT_FILE`, plus
the one named by `--client.ca-bundle` (`use_ca_bundle`). The context is built once per
combination and shared.
"""

from __future__ import annotations

import functools
import os
import ssl

from proctor.errors import ConfigError

_ca_bundle: str | None = None

TRUST_FIX = "trust its CA with --client.ca-bundle PATH or SSL_CERT_FILE=PATH"
"""How a user fixes a server certificate proctor refused (named in the error messages)."""

_PLAIN_HTTP_REASONS = frozenset({"WRONG_VERSION_NUMBER", "HTTP_REQUEST", "PACKET_LENGTH_TOO_LONG"})
"""OpenSSL's reasons when the bytes that came back were not a TLS record (an HTTP answer)."""


def ssl_error_in(error: BaseException) -> ssl.SSLError | None:
    """The `ssl.SSLError` behind a client library's connection error (aiohttp keeps it as
    `os_error`, httpx as the cause), if any."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        inner = getattr(current, "os_error", None)  # aiohttp's errors subclass SSLError too
        if isinstance(inner, ssl.SSLError):
            return inner
        if isinstance(current, ssl.SSLError):
            return current
        current = current.__cause__ or current.__context__
    return None


def tls_fix(error: BaseException, origin: str) -> str | None:
    """One sentence naming the cause and the fix of a failed TLS handshake with `origin`
    (`https://host:port`): a plain-HTTP server, or a certificate not trusted; else None."""
    found = ssl_error_in(error)
    if found is None:
        return None
    if getattr(found, "reason", None) in _PLAIN_HTTP_REASONS:
        plain = "http" + origin.removeprefix("https")
        return f"{origin} answered in plain HTTP, not TLS; use {plain} instead"
    if isinstance(found, ssl.SSLCertVerificationError):
        cause = found.verify_message or str(found)
        return f"the certificate of {origin} is not trusted ({cause}); {TRUST_FIX}"
    return None


def use_ca_bundle(path: str | None) -> None:
    """Trust the CA certificates in the PEM file `path` too, for every client of this process
    (the eval sets it from `--client.ca-bundle`, so the runs SDK in the same run agrees)."""
    global _ca_bundle
    _ca_bundle = path or None


def ssl_context(ca_bundle: str | None = None) -> ssl.SSLContext:
    """The verifying client context: system store, `SSL_CERT_FILE`, and `ca_bundle` (default:
    the one `use_ca_bundle` set).

    Raises:
        ConfigError: a named bundle cannot be read as PEM certificates.
    """
    return _context(ca_bundle or _ca_bundle, os.environ.get("SSL_CERT_FILE") or None)


@functools.lru_cache(maxsize=8)
def _context(ca_bundle: str | None, cert_file: str | None) -> ssl.SSLContext:
    try:
        import truststore
    except ImportError:  # pragma: no cover - a declared dependency; OpenSSL's store then
        context = ssl.create_default_context()
    else:
        context = truststore.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    for path, name in ((cert_file, "SSL_CERT_FILE"), (ca_bundle, "--client.ca-bundle")):
        if not path:
            continue
        try:
            context.load_verify_locations(cafile=path)
        except (OSError, ssl.SSLError) as e:
            reason = getattr(e, "strerror", None) or getattr(e, "reason", None) or e
            raise ConfigError(
                f"cannot load the CA certificates of {name} {path} ({reason}); "
                "point it at a PEM file of CA certificates"
            ) from e
    return context
