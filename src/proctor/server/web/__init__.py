"""The web dashboard: server-rendered pages over the evaluations service.

Pages: `/login`, `/logout`, `/evaluations` (list), `/evaluations/{id}`,
`/evaluations/{id}/samples`, `/evaluations/{id}/samples/{sample_id}`, `/compare?ids=a,b`.
Each answers its JSON twin with `?format=json`.
"""

from proctor.server.web.routes import router

__all__ = ["router"]
