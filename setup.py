"""Where tidelake's packages are: each layer folder is mapped under `tidelake.` (platform/ is
tidelake.platform), and every package inside a layer is found, none listed by hand.

setuptools' own finder (pyproject's `packages.find`) cannot add that prefix, hence this file;
everything else (the package data) is in pyproject.toml. jvm/ is a package of data only: the
poms and the Java sources, installed as `tidelake/jvm` beside `tidelake/protos`, so that
`tidelake install-jars` builds the same jars from an installed wheel as from a clone.
"""

from setuptools import find_packages, setup

LAYERS = ("platform", "assets", "streaming", "protos")


def layer_packages(layer: str) -> list[str]:
    return [f"tidelake.{layer}"] + [f"tidelake.{layer}.{p}" for p in find_packages(layer)]


setup(
    package_dir={f"tidelake.{layer}": layer for layer in LAYERS} | {"tidelake.jvm": "jvm"},
    packages=[p for layer in LAYERS for p in layer_packages(layer)] + ["tidelake.jvm"],
)
