"""Session fixture for a real postgres server (owned by the postgres backend)."""
