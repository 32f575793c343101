"""Sink plugins mirror the log elsewhere, driven by the observer hooks
(``brokkr_segment_rolled``, ``brokkr_high_watermark_advanced``)."""
