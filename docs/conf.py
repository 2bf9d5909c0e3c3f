"""Sphinx configuration of the fedjax_rl documentation (`make docs`; why Sphinx: about_these_docs.md)."""

import os
import pathlib
import sys

# Autodoc imports every module of the package. Pin JAX to the CPU so that building the pages never
# initialises (or waits for) an accelerator; importing fedjax_rl compiles nothing but a few module
# constants (about_these_docs.md says what was measured).
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# This checkout's fedjax_rl, whichever one the environment has installed.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

project = "fedjax_rl"
author = "fedjax_rl developers"
copyright = "fedjax_rl developers"

extensions = [
    "myst_nb",  # Markdown pages (MyST) and the committed notebooks, as optax renders its own
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
]

# Markdown and notebooks; myst_nb registers both parsers.
source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
exclude_patterns = ["_build", "**.ipynb_checkpoints"]
templates_path = ["_templates"]

# The notebooks are committed executed (`make notebooks`); the site renders their stored outputs and
# runs nothing, so a docs build takes no training time and needs no kernel.
nb_execution_mode = "off"

# GitHub-style anchors for headings, so `page.md#a-section` links work both on GitHub and here.
myst_heading_anchors = 4

autosummary_generate = True
# Each object once, on the page of the module that defines it (a package's `__all__` re-exports are
# not documented again, so `fedjax_rl.tabular.fedrq` the function does not shadow the module).
autodoc_default_options = {"members": True, "show-inheritance": True, "ignore-module-all": True}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
# The docstrings write code in single backquotes, as Markdown does: render it as code.
default_role = "code"
napoleon_google_docstring = True
napoleon_numpy_docstring = False

html_theme = "sphinx_book_theme"
html_title = "fedjax_rl"
html_theme_options = {"show_toc_level": 2, "navigation_with_keys": False}
