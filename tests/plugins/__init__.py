"""The suite's fixtures, registered by ``pytest_plugins`` in ``tests/conftest.py``."""
