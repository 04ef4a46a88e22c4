"""Signed A/B updates: bundles, slot writing, trial boot, health-gated commit, USB offers."""
