"""Suite-wide settings: every compile in the tests runs ember's IR verifiers after each kernel-compiler pass
(``ember.codegen.passes``), so a pass that breaks an invariant of the prim graph, the loop IR or the schedule
fails the test that compiled it, with the pass named."""
import os

os.environ.setdefault("EMBER_VERIFY_IR", "1")
