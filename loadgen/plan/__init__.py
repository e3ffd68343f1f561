"""The plan: an experiment's next step from the finished steps' verdicts (a grid, or a capacity search per
target). Pure functions, shared by the driver (steps on servers) and the twin (steps in virtual time)."""
