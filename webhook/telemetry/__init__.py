"""Metrics and logs: what every adapter records. Imports nothing else of the package."""
