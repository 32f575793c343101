"""Quota plugins."""
