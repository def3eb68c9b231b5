from grayscale_interception.taskset import GrayscaleInterceptionTaskset

__all__ = ["GrayscaleInterceptionTaskset"]
