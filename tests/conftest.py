"""Settings every test under tests/ shares."""

from hypothesis import settings

# Tests assert behaviour, never time: no per-example deadline (a loaded CI machine would turn
# slowness into flaky failures), and no database of past examples written into the checkout.
settings.register_profile("rescaler", deadline=None, database=None)
settings.load_profile("rescaler")
