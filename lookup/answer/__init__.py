"""Answering from a table: the conservative rules, estimates refined by the engine, compositions
over rounds, slices, the live engine and calibration (docs/lookup.md, docs/soundness.md)."""
