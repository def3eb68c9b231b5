from code_golf.taskset import CodeGolfEnv, CodeGolfTaskset

__all__ = ["CodeGolfEnv", "CodeGolfTaskset"]
