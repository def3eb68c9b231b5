"""The hosted-evaluations API: create (queue for the launcher), logs, cancel."""
