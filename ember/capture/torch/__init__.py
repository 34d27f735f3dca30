"""Torch knowledge for the capture interpreter: tensor and module values, torch calls as FX nodes, tensor
and global-state guards, and graph construction. This is the only part of ``ember.capture`` that imports
torch."""
from .plugin import TorchPlugin, plugins_factory, readable_graph  # noqa: F401
