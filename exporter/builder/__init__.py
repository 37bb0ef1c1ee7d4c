"""Building the artifacts: each in a child process of a build server (isolation), in build order (builds).

A regular package (not a namespace one) so that setuptools' ``packages.find`` ships it in a wheel.
"""
