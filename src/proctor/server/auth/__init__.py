"""API keys, users, teams and the principal each request acts as."""
