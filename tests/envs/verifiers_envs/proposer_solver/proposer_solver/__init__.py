from proposer_solver.taskset import (
    ProposerSolverEnv,
    ProposerSolverEnvConfig,
    ProposerSolverTaskset,
)

__all__ = ["ProposerSolverEnv", "ProposerSolverEnvConfig", "ProposerSolverTaskset"]
