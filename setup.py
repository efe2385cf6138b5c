"""The one thing pyproject.toml cannot say: the optional C extensions (the XPlane wire decoder's
kernels, the §9 replay's sweep).

Optional: where no C compiler is there, the build goes on without them: the reader
decodes through numba (the ``fast`` extra) or numpy instead, and the replay sweeps through numba,
or through numpy for jobs up to 50,000 activities.
"""

import os

from setuptools import Extension, setup

# CI sets MOEPROF_REQUIRE_NATIVE=1 where a C compiler is: a kernel that does not compile then fails the build,
# with the compiler's error, instead of installing a package without it
OPTIONAL = os.environ.get("MOEPROF_REQUIRE_NATIVE") != "1"

setup(
    ext_modules=[
        Extension("moeprof.readers._xplane_native", ["moeprof/readers/_xplane_native.c"], optional=OPTIONAL),
        Extension(
            "moeprof.insight.projection._replay_native",
            ["moeprof/insight/projection/_replay_native.c"],
            optional=OPTIONAL,
        ),
    ]
)
