"""Figures from experiment results (no computation here beyond what a figure needs)."""
