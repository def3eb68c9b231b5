"""Deleting an evaluation: who may, and when (a proctor extension of the wire contract).

Deleting is final — the record, its samples, its statistics and its hosted state go — so it
is for fewer hands than writing: the evaluation's owner, an admin of its team, or a platform
admin (`service.may_manage`, the rule a rename by `PUT /evaluations/{id}` follows too); never
a key scoped to one evaluation. A hosted evaluation whose sandbox may still run is cancelled
first.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from proctor.contract import OPEN_STATUSES
from proctor.server.auth.schemas import Principal
from proctor.server.db.models import Evaluation
from proctor.server.errors import Conflict, Forbidden
from proctor.server.evaluations import repository
from proctor.server.evaluations.service import get_visible, may_manage


def may_delete(session: Session, principal: Principal, evaluation: Evaluation) -> bool:
    """Whether the principal may delete the evaluation (owner, team admin, platform admin)."""
    return principal.scope_evaluation_id is None and may_manage(session, principal, evaluation)


def delete_evaluation(session: Session, principal: Principal, evaluation_id: str) -> str:
    """Delete the evaluation and everything stored under it; returns its name.

    Raises:
        NotVisible: It does not exist or is not visible to this key.
        Forbidden: The key may see it but not delete it.
        Conflict: It is hosted and still open (cancel it first).
    """
    principal.require_unscoped()
    evaluation = get_visible(session, principal, evaluation_id, for_update=True)
    if not may_delete(session, principal, evaluation):
        raise Forbidden(
            f"only the owner of evaluation {evaluation_id}, an admin of its team or a platform "
            "admin may delete it; rename or leave it instead"
        )
    if evaluation.is_hosted and evaluation.status in OPEN_STATUSES:
        raise Conflict(
            f"evaluation {evaluation_id} is hosted and still {evaluation.status}; cancel it "
            f"first (`proctor hosted cancel {evaluation_id}`), then delete it",
            code="evaluation_open",
        )
    name = evaluation.name
    repository.delete(session, evaluation)
    return name
