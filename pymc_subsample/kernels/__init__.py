"""Kernels: one transition of each algorithm as plain functions over arrays (no PyMC)."""
