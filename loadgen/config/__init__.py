"""Typed configuration, read from TOML and validated completely before any request is sent; every error names
the dotted key, what is wrong and the fix. One module a file kind: experiment (the experiment file), targets
(one server to drive), fleet (nodes and launch profiles), over tables (the strict TOML reader they share).
"""

from loadgen.config.experiment import Experiment, LoadConfig, config_hash, load_experiment, parse_experiment
from loadgen.config.fleet import PROFILES_DIR, Fleet, FleetNode, Locator, Profile, Stage, load_profile, parse_fleet
from loadgen.config.tables import NAME_PATTERN, StrictTable, check_name, load_toml
from loadgen.config.targets import TargetConfig, check_url, emulator_args

__all__ = ["NAME_PATTERN", "PROFILES_DIR", "Experiment", "Fleet", "FleetNode", "LoadConfig", "Locator", "Profile",
           "Stage", "StrictTable", "TargetConfig", "check_name", "check_url", "config_hash", "emulator_args",
           "load_experiment", "load_profile", "load_toml", "parse_experiment", "parse_fleet"]
