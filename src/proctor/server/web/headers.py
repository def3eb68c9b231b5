"""Security headers on every response: a strict CSP the dashboard satisfies, and friends.

The pages load only their own stylesheet, script and icon and use no inline script or
style (the histograms are inline SVG coloured by classes), so the policy allows `'self'`
and nothing else; `frame-ancestors 'none'` keeps the dashboard out of other sites' frames.
`error_handlers.ServerErrors`, the outermost middleware, adds them to every answer (API
answers and errors too) that does not set them itself.
"""

from __future__ import annotations

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = (
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
)
