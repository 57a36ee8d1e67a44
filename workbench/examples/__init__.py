"""Example training scripts shipped with workbench."""
