"""Experiments: functions that run theory and simulation and return results (no files, no
figures; the commands write those)."""
