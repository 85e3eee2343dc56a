"""The package version, in a module of its own so that what records it (an exported
artifact's manifest, a fuzz run's log) imports it without importing the package root."""
__version__ = "0.1.0"
