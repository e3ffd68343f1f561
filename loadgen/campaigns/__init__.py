"""Campaigns above the driver: questions answered by many runs or predictions (a fleet plan, docs/planning.md)."""
