"""The version, in a module of its own so anything can read it without importing the package."""

__version__ = "0.2.0.dev0"
