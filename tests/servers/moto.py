"""Session fixture for a real moto server (owned by the moto backend)."""
