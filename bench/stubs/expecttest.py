"""A stand-in for the ``expecttest`` package where it is not installed (the device machine has no network):
``torch.testing._internal.common_utils`` imports it for ``TestCase`` and the ``ACCEPT`` flag, and the OpInfo
sweep (``bench/opinfo_aot.py``) needs nothing more of it. Put on ``sys.path`` only by ``bench/gpu_opinfo.sh``,
and only when the real package is missing."""
import unittest

ACCEPT = False


class TestCase(unittest.TestCase):
    def assertExpectedInline(self, actual, expect, skip=0):  # noqa: N802 - expecttest's name
        self.assertEqual(actual, expect)
