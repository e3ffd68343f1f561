"""GPU telemetry of the GPU that serves a target: readers (NVML on the node, or a DCGM exporter's /metrics) mapped
to one reading per GPU (readings.py), and the sampler actor that reads them once a second and at each step's
start and end (sampler.py). docs/telemetry.md says what is read, from where, and why."""
