"""The one thing pyproject.toml cannot say: the optional C extensions (the XPlane wire decoder's
kernels, the §9 replay's sweep).

``optional=True``: where no C compiler is there, the build goes on without them: the reader
decodes through numba (the ``fast`` extra) or numpy instead, and the replay sweeps through numba,
or through numpy for jobs up to 50,000 activities.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "moeprof.readers._xplane_native",
            ["moeprof/readers/_xplane_native.c"],
            optional=True,
        ),
        Extension("moeprof.core._replay_native", ["moeprof/core/_replay_native.c"], optional=True),
    ]
)
