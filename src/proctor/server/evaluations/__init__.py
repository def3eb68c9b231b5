"""Evaluations: records, samples, finalize and the statistics task."""
