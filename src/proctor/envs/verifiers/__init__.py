"""The verifiers driver: run a `verifiers.v1` environment through proctor's engine.

`proctor eval ID` runs a verifiers environment when `ID` names an installed verifiers
taskset, resolved as `vf-eval` resolves it (the package `ID` with `-` read as `_`, or one of
verifiers' bundled tasksets). The environment is composed exactly as `vf-eval` composes it:
`--env-args` is the `[env]` block `vf-eval` reads (`{"taskset": {...}, "agent": {"harness":
{...}, "runtime": {...}}, ...}`), validated by verifiers' own config models; the taskset id
comes from `ID`. Each episode runs through proctor's scheduler, workers, run directory,
resume and push; a finished verifiers episode is kept whole on the proctor episode
(`Episode.native`) and becomes its platform sample through `proctor.projection`.

Needs the optional extra `proctor[verifiers]`.
"""

from proctor.envs.verifiers._environment import VerifiersEnvironment, load_verifiers_environment
from proctor.envs.verifiers._harness_index import build_harness_index
from proctor.envs.verifiers._resolve import installed_environments, is_verifiers_environment

__all__ = [
    "VerifiersEnvironment",
    "build_harness_index",
    "installed_environments",
    "is_verifiers_environment",
    "load_verifiers_environment",
]
