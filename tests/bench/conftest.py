import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread():
    # the bench tests time nothing; one thread avoids OpenMP wake-up stalls on a busy 2-core machine
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
