import pytest

# the app's page driver and CLI oracle (asserts in them report like the tests' own)
pytest.register_assert_rewrite("tests.e2e.app_driver")
