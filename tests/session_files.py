"""What the test processes of one pytest session share on disk (kept free of heavy imports: the conftest reads it)."""

# The environment variable naming the session's folder of compositions (tests/stack_helpers.py: shipped_plan,
# composed, composed_file): made by tests/conftest.py before the xdist workers start, so they inherit it.
SHARED_ENV = "VERL_GKE_TEST_COMPOSITIONS"
