"""Authentication and authorization plugins."""
