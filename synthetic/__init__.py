"""Test-data generators (not part of the installed package): traces whose true figures are known.

``python -m synthetic sample_traces`` rebuilds the committed samples.
"""
