"""Suite-wide settings: every compile in the tests runs ember's IR verifiers after each kernel-compiler pass
(``ember.codegen.passes``), so a pass that breaks an invariant of the prim graph, the loop IR or the schedule
fails the test that compiled it, with the pass named."""
import os

os.environ.setdefault("EMBER_VERIFY_IR", "1")
# Tests patch ember's internals (lowering rules, tables) to compare plans; a whole-graph cache entry made
# under another test's patch would skip the very lowering they inspect. tests/runtime/test_graph_cache.py
# turns the cache back on where it is the subject.
os.environ.setdefault("EMBER_GRAPH_CACHE", "0")


def _interpret_triton_without_cuda() -> None:
    """Triton picks interpreter or compiler mode when ``triton.language`` is first imported, and a test module
    can import it while it is collected (``@torch._dynamo.assume_constant_result`` at module level imports
    Dynamo, which imports triton): without CUDA, the Triton tests' interpreter mode is set here, before any test
    module, not only in tests/codegen's and tests/loopir's conftest (a worker that imported triton first ran
    every later Triton kernel calling ``tl.sum`` into "Cannot call @triton.jit'd outside of the scope of a
    kernel")."""
    try:
        import torch
    except ImportError:         # the torch-free interpreter suite on other CPythons (tools/run_tests.sh)
        return
    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")


_interpret_triton_without_cuda()
