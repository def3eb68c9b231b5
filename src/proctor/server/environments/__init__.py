"""The environments hub: names of environments that evaluations refer to."""
