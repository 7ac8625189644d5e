"""Measuring: metrics, experiments and calibration shared by the notebooks, tests and bench/."""
