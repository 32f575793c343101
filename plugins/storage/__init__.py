"""Storage plugins: implementations of ``brokkr_open_storage`` (see brokkr.core.log)."""
