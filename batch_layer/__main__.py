"""`python -m batch_layer --cutoff <ms>`: one batch run with the environment's settings."""

from __future__ import annotations

import sys

from batch_layer.job import main

sys.exit(main())
