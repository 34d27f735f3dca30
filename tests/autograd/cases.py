"""Small functions and modules traced by the autograd tests: name -> () -> (fn, example inputs)."""
import torch
from torch import nn

from ember.autograd.trace import lift_module

F = nn.functional


def _module_case(module, *inputs):
    def make():
        torch.manual_seed(0)
        m = module()
        fn, state = lift_module(m)
        return fn, [t.detach().clone().requires_grad_(t.requires_grad) for t in state] + [i() for i in inputs]
    return make


def _fn_case(fn, *inputs):
    return lambda: (fn, [i() for i in inputs])


def _x(*shape, grad=True):
    return lambda: torch.randn(*shape, requires_grad=grad)


def _inplace_on_input(x, y):
    x.add_(y)
    x[0].mul_(2.0)
    return x.sin() * y


def _out_and_views(x, y):
    v = x.view(-1)
    torch.mul(v, 3.0, out=y.view(-1))
    x.t()[1].zero_()
    return x + y, v.sum()


CASES = {
    "mlp": _module_case(lambda: nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3)), _x(5, 6)),
    "conv_bn": _module_case(lambda: nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU()),
                            _x(2, 3, 8, 8)),
    "conv_bn_eval": _module_case(lambda: nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)).eval(),
                                 _x(2, 3, 8, 8)),
    "softmax": _fn_case(lambda x: torch.softmax(x * 2, -1), _x(4, 7)),
    "log_softmax_nll": _fn_case(lambda x, t: F.nll_loss(F.log_softmax(x, -1), t), _x(4, 7),
                                lambda: torch.tensor([0, 3, 6, 2])),
    "layer_norm": _module_case(lambda: nn.LayerNorm(7), _x(3, 5, 7)),
    "dropout_p0": _module_case(lambda: nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.0)), _x(3, 4)),
    "tuple_outputs": _fn_case(lambda x, y: (x @ y, (x.exp(), y.tanh().sum())), _x(3, 4), _x(4, 2)),
    "inplace_on_input": _fn_case(_inplace_on_input, _x(3, 4, grad=False), _x(3, 4)),
    "out_and_views": _fn_case(_out_and_views, _x(3, 3, grad=False), _x(3, 3, grad=False)),
    "constant_and_factory": _fn_case(lambda x: x * torch.tensor([1.0, 2.0, 3.0]) + torch.ones(3), _x(2, 3)),
}
