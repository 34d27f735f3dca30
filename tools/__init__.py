"""Developer tools for ember (not part of the shipped ``ember`` package): the differential fuzzer (fuzz/), the
peer-suite harness (peer/), the test runner."""
