"""The one logging switch: GPE_LOG=debug|info|warning logs gpe's decisions with reasons,
the generated host and TF programs, and fallbacks, on the `gpe` logger."""
from __future__ import annotations

import logging
import os


def configure() -> None:
    level = os.environ.get("GPE_LOG", "").strip().upper()
    if not level:
        return
    logger = logging.getLogger("gpe")
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("gpe %(levelname)s: %(message)s"))
        logger.addHandler(handler)
    value = logging.getLevelName(level)  # the number for a known level name
    logger.setLevel(value if isinstance(value, int) else logging.DEBUG)
