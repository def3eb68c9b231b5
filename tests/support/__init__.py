"""What the tests share: processes on loopback, databases, waiting, the tiers of the suite."""
