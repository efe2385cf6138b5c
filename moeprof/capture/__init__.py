"""Capture: profile a MoE training step (the built-in demo, a launched command, a live job, Nsight)
and write a run folder that ``moeprof analyze`` reads."""
