-- gpu_by_step: the GPU serving each target during each step's measurement window (docs/telemetry.md).
--
-- From gpu_samples (once a second, plus a sample at each step's start and end) inside the window
-- [t_measure_start_ns, t_measure_end_ns] (views.sql `gpu_window`); a target served by several GPUs: power and
-- energy summed, clock the median of its GPUs, temperature the hottest, a reason when any GPU has it.
--   samples                 sample instants in the window
--   sm_clock_median_mhz     median SM clock; sm_clock_max_mhz the GPU's maximum; clock_pct_of_max their ratio
--   power_p50_w, power_max_w   median and highest power draw (W)
--   temperature_max_c       hottest reading
--   utilization_pct         mean GPU utilisation (share of each sample period a kernel ran)
--   throttled_pct           share of the window's samples with a clock-event reason that slows a working GPU
--                           (software power cap, hardware slowdown, software or hardware thermal slowdown, power
--                           brake); then each reason's own share (idle_pct: the GPU had no work)
--   power_violation_pct, thermal_violation_pct   where the source reports violation counters: the time the
--                           power or a thermal limit held the clocks down, as a share of the samples' span
--   energy_j                joules over the window: the total-energy counter interpolated at the window's ends
--                           (energy_method 'counter'), or median power x window ('power')
--   emulated                the emulator's modelled GPU (its energy counts modelled time: see docs/telemetry.md)
SELECT s.run_id, s.step_id, s.target, s.node, s.algorithm, s.concurrency, s.rate, s."repeat",
       round(s.window_s, 2) AS window_s, w.samples,
       round(w.sm_clock_median_mhz, 0) AS sm_clock_median_mhz, round(w.sm_clock_max_mhz, 0) AS sm_clock_max_mhz,
       round(100 * w.sm_clock_median_mhz / nullif(w.sm_clock_max_mhz, 0), 1) AS clock_pct_of_max,
       round(w.power_p50_w, 1) AS power_p50_w, round(w.power_max_w, 1) AS power_max_w,
       round(w.temperature_max_c, 1) AS temperature_max_c, round(w.utilization_pct, 1) AS utilization_pct,
       round(w.throttled_pct, 1) AS throttled_pct,
       round(w.sw_power_cap_pct, 1) AS sw_power_cap_pct, round(w.hw_slowdown_pct, 1) AS hw_slowdown_pct,
       round(w.sw_thermal_slowdown_pct, 1) AS sw_thermal_slowdown_pct,
       round(w.hw_thermal_slowdown_pct, 1) AS hw_thermal_slowdown_pct,
       round(w.hw_power_brake_pct, 1) AS hw_power_brake_pct, round(w.idle_pct, 1) AS idle_pct,
       round(w.power_violation_pct, 1) AS power_violation_pct, round(w.thermal_violation_pct, 1) AS thermal_violation_pct,
       round(e.energy_j, 1) AS energy_j, e.energy_method, s.emulated
FROM step_info s
JOIN gpu_window w USING (run_id, step_id, target)
LEFT JOIN gpu_step_energy e USING (run_id, step_id, target)
ORDER BY s.run_id, s.step_id, s.target_index, s.target;
