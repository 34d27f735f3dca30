"""Fake tensors keep what eager computes: shape, dtype, strides, device (also a fake cuda on a CPU machine)."""
import pytest
import torch

from ember.autograd.fake import DataDependentOpError, FakeDeviceError, FakeMode, FakeTensor

F = torch.nn.functional


def _a():
    return torch.randn(4, 6)


OPS = {
    "add": lambda a: a + 1.5,
    "mul_bcast": lambda a: a * torch.randn(6),
    "matmul": lambda a: a @ torch.randn(6, 3),
    "transpose": lambda a: a.t(),
    "transpose_contig": lambda a: a.t().contiguous(),
    "slice": lambda a: a[1:, ::2],
    "select": lambda a: a[2],
    "view": lambda a: a.view(2, 12),
    "permute_exp": lambda a: a.unsqueeze(0).expand(3, 4, 6).permute(2, 0, 1),
    "sum_dim": lambda a: a.sum(1, keepdim=True),
    "mean": lambda a: a.mean(),
    "softmax": lambda a: torch.softmax(a, -1),
    "layer_norm": lambda a: F.layer_norm(a, (6,)),
    "to_half": lambda a: a.to(torch.float16),
    "to_int_promote": lambda a: a.to(torch.int32) + 1.0,
    "cat": lambda a: torch.cat([a, a.t().t()], 0),
    "where": lambda a: torch.where(a > 0, a, 0.0),
    "cumsum": lambda a: a.cumsum(0),
    "channels_last_conv": lambda a: F.conv2d(a.view(1, 1, 4, 6).contiguous(memory_format=torch.channels_last),
                                             torch.randn(2, 1, 3, 3)),
    "max_dim": lambda a: a.max(1),
    "zeros_like_t": lambda a: torch.zeros_like(a.t()),
    "arange": lambda a: torch.arange(10, dtype=torch.float64),
    "inplace_view": lambda a: a.view(24).add_(1),
}


def _leaves(x):
    return list(x) if isinstance(x, (tuple, list)) else [x]


@pytest.mark.parametrize("name", sorted(OPS))
def test_fake_matches_real(name):
    torch.manual_seed(0)
    real_in = _a()
    real = _leaves(OPS[name](real_in.clone()))
    mode = FakeMode()
    torch.manual_seed(0)
    fake_in = mode.to_fake(_a())
    with mode:
        fake = _leaves(OPS[name](fake_in))
    assert len(fake) == len(real)
    for f, r in zip(fake, real):
        assert isinstance(f, FakeTensor)
        assert (f.shape, f.dtype, f.stride(), f.device) == (r.shape, r.dtype, r.stride(), r.device)


def test_fake_cuda_factories_and_binary_ops():
    mode = FakeMode()
    with mode:
        z = torch.zeros(2, 3, device="cuda:1")
        r = torch.randn(3, device="cuda")
        s = z + r                          # cuda + cuda
        t = z * torch.tensor(2.0)          # CPU scalar tensor follows the cuda operand
        u = torch.ones(2, 3).to("cuda:1")  # _to_copy with device kwarg
        v = torch.empty_like(z, dtype=torch.float16)
    assert z.device == torch.device("cuda:1") and r.device == torch.device("cuda:0")
    assert s.device == torch.device("cuda:1") and s.shape == (2, 3)
    assert t.device == torch.device("cuda:1")
    assert u.device == torch.device("cuda:1")
    assert v.device == torch.device("cuda:1") and v.dtype == torch.float16
    assert z.is_cuda


def test_fake_cuda_autograd_errors_instead_of_abort():
    if torch.cuda.is_available():
        pytest.skip("only meaningful on a machine without CUDA")
    mode = FakeMode()
    with pytest.raises(FakeDeviceError):
        mode.to_fake(torch.randn(3, requires_grad=True), device=torch.device("cuda"))


def test_memo_and_view_aliasing():
    mode = FakeMode()
    x = torch.randn(4, 5)
    fx = mode.to_fake(x)
    assert mode.to_fake(x) is fx
    v = mode.to_fake(x[1:])
    assert v._meta.untyped_storage()._cdata == fx._meta.untyped_storage()._cdata
    assert v.storage_offset() == 5
    assert mode.to_fake(x.clone()) is not fx


def test_inplace_returns_same_object():
    mode = FakeMode()
    with mode:
        a = torch.randn(3)
        assert a.mul_(2) is a
        out = torch.empty(3)
        assert torch.add(a, 1, out=out) is out


@pytest.mark.parametrize("fn", [lambda a: a.sum().item(), lambda a: a.nonzero(), lambda a: bool(a.sum() > 0),
                                lambda a: a[a > 0]])
def test_data_dependent_ops_raise(fn):
    mode = FakeMode()
    a = mode.to_fake(torch.randn(5))
    with mode, pytest.raises(DataDependentOpError, match="aten"):
        fn(a)


def test_autograd_on_fake_cpu():
    mode = FakeMode()
    w = mode.to_fake(torch.randn(3, 4, requires_grad=True))
    with mode:
        y = (w.sin() * 2).sum()
        (g,) = torch.autograd.grad(y, w)
    assert isinstance(g, FakeTensor) and g.shape == (3, 4)
