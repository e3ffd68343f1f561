"""A twin of a measured target: the emulator's cost model with its numbers fitted to the target's own requests at a
few load levels (fit.py), run in virtual time to predict other levels and what-if experiments (predict.py), always
with the error of its fit (docs/twin.md)."""
