"""Session fixture for a real redis server (owned by the redis backend)."""
