"""Campaigns: questions that combine runs (the draft-budget question; fleet plans), above the driver that runs
each of them."""
