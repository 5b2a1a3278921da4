"""Settings every test under tests/ shares."""

import os

from hypothesis import settings

# Tests assert behaviour, never time: no per-example deadline (a loaded CI machine would turn
# slowness into flaky failures), and no database of past examples written into the checkout.
# In CI the examples are derandomized, so a landing never depends on the luck of the draw;
# developers' runs keep exploring new examples (RESCALER_MODEL_EXAMPLES=400 for a deep run).
settings.register_profile(
    "rescaler", deadline=None, database=None, derandomize=bool(os.environ.get("CI"))
)
settings.load_profile("rescaler")
