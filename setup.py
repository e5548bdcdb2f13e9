"""Builds libetch for the Python package: `pip install .` runs CMake on this checkout and copies the
shared library into the package (etch/libetch.so.0), where etch/_lib.py looks first. With
ETCH_LIBRARY set, or outside a checkout, nothing is built and the package uses the libetch it finds
at run time."""
import os
import shutil
import subprocess

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))


class BuildWithLibrary(build_py):
    def run(self):
        super().run()
        if os.environ.get("ETCH_LIBRARY") or not os.path.exists(os.path.join(ROOT, "CMakeLists.txt")):
            return
        build = os.path.join(ROOT, "build-python")
        subprocess.check_call(["cmake", "-S", ROOT, "-B", build, "-DETCH_TESTS=OFF", "-DCMAKE_BUILD_TYPE=Release"])
        subprocess.check_call(["cmake", "--build", build, "--target", "etch_shared", "-j", str(os.cpu_count() or 2)])
        dest = os.path.join(self.build_lib, "etch", "libetch.so.0")
        shutil.copyfile(os.path.realpath(os.path.join(build, "libetch.so.0")), dest)  # the file, not the link


class BinaryDistribution(Distribution):
    """The wheel carries a shared library: tag it for this platform, not as pure Python."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildWithLibrary}, distclass=BinaryDistribution)
