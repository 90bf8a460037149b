"""Harnesses the tests and benches share; not part of the installed package."""
