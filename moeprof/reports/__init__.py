"""Renderers: each reads an AnalysisResult and nothing else."""
