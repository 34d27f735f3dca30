"""bench/kernel_traffic.py with CUDA's lowering decisions forced on the CPU, to read a GPU graph's traffic without
a GPU: bf16 convolutions run channels-last (as cuDNN's do), long reductions split as on CUDA, and softmax runs in
float32 under bf16 autocast (CUDA's autocast lists softmax as a float32 op; the CPU's keeps it in bf16). Other
CUDA-only decisions (matmul operand padding, patch embeddings as matmuls, row-tiled pointwise) are not applied.

    python bench/kernel_traffic_cuda_like.py --model resnet --suite full --config batch=2 --dtype bf16
"""
import sys, runpy
import torch
import ember.loopir.conv_layout as CL
import ember.loopir.lowerings as LW
CL.DTYPES["cpu"] = (torch.float32, torch.bfloat16)
real = LW._split_factor
LW._split_factor = lambda dev, x, r, outer=False: real(torch.device("cuda"), x, r, outer)
_softmax, _fsoftmax = torch.softmax, torch.nn.functional.softmax


def _upcast(f):
    def softmax(x, dim=None, *args, **kwargs):
        if torch.is_autocast_enabled("cpu") and x.dtype == torch.bfloat16:
            x = x.float()
        return f(x, dim, *args, **kwargs)
    return softmax


torch.softmax, torch.nn.functional.softmax = _upcast(_softmax), _upcast(_fsoftmax)
sys.argv = ["kernel_traffic.py"] + sys.argv[1:]
runpy.run_path("bench/kernel_traffic.py", run_name="__main__")
