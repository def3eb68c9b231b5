from bash_interception.taskset import BashInterceptionTaskset

__all__ = ["BashInterceptionTaskset"]
