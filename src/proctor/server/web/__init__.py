"""The web dashboard: server-rendered pages over the evaluations service.

Pages: `/login`, `/logout`, `/evaluations` (list), `/evaluations/{id}`,
`/evaluations/{id}/samples`, `/evaluations/{id}/sample?id=...` (any id; also
`/evaluations/{id}/samples/{sample_id}`), `/compare?ids=a,b`,
`/compare/example?ids=a,b&example=N`, `/environments`, `/environments/{owner}/{name}`,
`/dashboard/tokens/challenge` (approving a `prime login`);
`POST /evaluations/{id}/cancel` for hosted runs.
Each page answers its JSON twin with `?format=json`; live pages poll it and patch
themselves in place.
"""

from proctor.server.web.challenge_page import router as _challenge_page
from proctor.server.web.environment_pages import router as _environment_pages
from proctor.server.web.routes import router

router.include_router(_environment_pages)
router.include_router(_challenge_page)

__all__ = ["router"]
