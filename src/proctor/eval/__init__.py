"""The evaluation engine: config, scheduler, run directory, resume, progress view."""
