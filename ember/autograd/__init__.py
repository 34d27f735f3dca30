"""ember.autograd: AOTAutograd's role — fake tensors, ATen tracing (forward and joint forward+backward) and
functionalization. Input: a callable (typically a torch.fx.GraphModule) and example inputs. Output: functional
ATen-level FX graphs plus the metadata the runtime needs (input write-backs, gradient positions)."""
