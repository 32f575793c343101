"""Storage plugins: implementations of ``brokkr_open_log`` (see brokkr.core.log)."""
