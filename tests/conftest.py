"""Suite-wide settings: every compile in the tests runs ember's IR verifiers after each kernel-compiler pass
(``ember.codegen.passes``), so a pass that breaks an invariant of the prim graph, the loop IR or the schedule
fails the test that compiled it, with the pass named."""
import os

os.environ.setdefault("EMBER_VERIFY_IR", "1")
# Tests patch ember's internals (lowering rules, tables) to compare plans; a whole-graph cache entry made
# under another test's patch would skip the very lowering they inspect. tests/runtime/test_graph_cache.py
# turns the cache back on where it is the subject.
os.environ.setdefault("EMBER_GRAPH_CACHE", "0")
