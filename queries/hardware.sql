-- hardware: what each target's node and GPU were (steps.hardware, recorded by its GPU sampler; docs/telemetry.md).
--
-- Per run, node and target: the GPU model(s), driver and CUDA version (a DCGM exporter reports no CUDA version),
-- the node's host name, OS and the loadgen version that ran there, and where the telemetry was read (source), or
-- why none was (unavailable). Values that differ between a target's GPUs or steps are joined by ' | '.
-- emulated: the emulator's modelled GPU. Runs of schema 5 and older recorded none: no rows.
SELECT run_id, node, target, gpu_name, driver_version, cuda_version, host, os, loadgen_version, source, unavailable,
       emulated
FROM target_hardware
ORDER BY run_id, node, target_index, target;
