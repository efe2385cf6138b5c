"""The one thing pyproject.toml cannot say: the optional C extension of the XPlane wire decoder.

``optional=True``: where no C compiler is there, the build goes on without it and the reader
decodes through numba (the ``fast`` extra) or numpy instead.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "moeprof.readers._xplane_native",
            ["moeprof/readers/_xplane_native.c"],
            optional=True,
        )
    ]
)
