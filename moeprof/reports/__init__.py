"""Renderers: each reads an Analysis (and, for the timeline, its timeline view) and only renders."""
