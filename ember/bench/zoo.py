"""The benchmark's model zoo, built without downloads: random weights, configs written here.

Each ``ZooEntry`` builds a ``Workload`` for a suite ("quick": tiny shapes for a 2-core CPU; "full": realistic
shapes for a GPU). A workload is a model, a function that makes fresh random inputs (never zeros) from a seed,
and a loss ``loss(output, target) -> scalar`` for the training step. Families other than the hand-written one
need an optional package (``transformers``, ``timm`` or ``torchvision``); when it cannot be imported its
models are skipped with one line that says why, never a crash.

    entries, skipped = select_models("quick", None)
    for e in entries:
        w = e.build("quick", torch.device("cpu"))
        inputs = w.make_inputs(0, torch.device("cpu"))
        out = w.model(*inputs.args, **inputs.kwargs)
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from . import models_handwritten as hw
from .workload import Inputs, Workload, ZooEntry, gen, no_dropout, probe, randint, randn

__all__ = ["Inputs", "Workload", "ZooEntry", "gen", "no_dropout", "probe", "randint", "randn", "HANDWRITTEN",
           "SUITES", "FAMILIES", "all_entries", "configured_workload", "expand_names", "model_names",
           "select_models"]

SUITES = ("quick", "full")


# --------------------------------------------------------------------------------- hand-written builders
def build_mlp(c: dict) -> Workload:
    model = hw.MLP(c["d_in"], c["d_hidden"], c["d_out"], c["depth"])

    def make_inputs(seed, device):
        return Inputs((randn(seed, device, c["batch"], c["d_in"]),),
                      target=randint(seed + 1, device, c["d_out"], c["batch"]))
    return Workload(model, make_inputs, hw.classify_loss)


def build_resnet(c: dict) -> Workload:
    model = hw.ResNet(c["width"], tuple(c["blocks"]), c["classes"])

    def make_inputs(seed, device):
        return Inputs((randn(seed, device, c["batch"], 3, c["res"], c["res"]),),
                      target=randint(seed + 1, device, c["classes"], c["batch"]))
    return Workload(model, make_inputs, hw.classify_loss)


def build_encoder(c: dict) -> Workload:
    model = hw.Encoder(c["d_model"], c["n_head"], c["d_ff"], c["n_layer"])

    def make_inputs(seed, device):
        b, s = c["batch"], c["seq"]
        mask = torch.zeros(b, s, dtype=torch.bool)
        mask[1:, -(s // 4):] = True  # padding at the end of every sequence but the first; no row fully masked
        return Inputs((randn(seed, device, b, s, c["d_model"]), mask.to(device)),
                      target=randn(seed + 1, device, b, s, c["d_model"]))
    return Workload(model, make_inputs, hw.regression_loss)


def build_nanogpt(c: dict) -> Workload:
    model = hw.NanoGPT(c["vocab"], c["block"], c["n_layer"], c["n_head"], c["n_embd"])

    def make_inputs(seed, device):
        return Inputs((randint(seed, device, c["vocab"], c["batch"], c["seq"]),),
                      target=randint(seed + 1, device, c["vocab"], c["batch"], c["seq"]))
    return Workload(model, make_inputs, hw.token_loss)


HANDWRITTEN = [
    ZooEntry("mlp", "handwritten", build_mlp, {
        "quick": {"batch": 32, "d_in": 64, "d_hidden": 128, "d_out": 10, "depth": 4},
        "full": {"batch": 1024, "d_in": 1024, "d_hidden": 4096, "d_out": 1000, "depth": 6}}),
    ZooEntry("resnet", "handwritten", build_resnet, {
        "quick": {"batch": 8, "res": 16, "width": 8, "blocks": (1, 1), "classes": 10},
        "full": {"batch": 64, "res": 224, "width": 64, "blocks": (2, 2, 2, 2), "classes": 1000}}),
    ZooEntry("encoder", "handwritten", build_encoder, {
        "quick": {"batch": 4, "seq": 32, "d_model": 64, "n_head": 4, "d_ff": 256, "n_layer": 2},
        "full": {"batch": 16, "seq": 512, "d_model": 768, "n_head": 12, "d_ff": 3072, "n_layer": 6}}),
    ZooEntry("nanogpt", "handwritten", build_nanogpt, {
        "quick": {"batch": 4, "seq": 64, "vocab": 256, "block": 64, "n_layer": 2, "n_head": 4, "n_embd": 64},
        "full": {"batch": 8, "seq": 512, "vocab": 50304, "block": 1024, "n_layer": 6, "n_head": 12,
                 "n_embd": 768}}),
]


# ----------------------------------------------------------------------------------------- the registry
def all_entries() -> list[ZooEntry]:
    from .zoo_hf import HF_ENTRIES
    from .zoo_vision import VISION_ENTRIES
    return HANDWRITTEN + HF_ENTRIES + VISION_ENTRIES


FAMILIES = ("handwritten", "transformers", "vision")
SUITE_DEFAULT_FAMILIES = {"quick": ("handwritten",), "full": FAMILIES}


def model_names() -> list[str]:
    return [e.name for e in all_entries()]


def expand_names(names: list[str] | None, suite: str) -> list[str]:
    """Model names from ``--models``: names, family names, or ``all``; None is the suite's default."""
    entries = all_entries()
    if not names:
        return [e.name for e in entries if e.family in SUITE_DEFAULT_FAMILIES[suite]]
    out: list[str] = []
    for n in names:
        if n == "all":
            out += [e.name for e in entries]
        elif n in FAMILIES:
            out += [e.name for e in entries if e.family == n]
        elif any(e.name == n for e in entries):
            out.append(n)
        else:
            raise ValueError(f"unknown model {n!r}; known: {', '.join(model_names())}, or a family "
                             f"({', '.join(FAMILIES)}) or 'all'")
    return list(dict.fromkeys(out))


def configured_workload(suite: str, name: str, overrides: list[str], device: torch.device) -> Workload:
    """One model's workload built (seed 0) with ``KEY=VALUE`` integer overrides of its suite config (``res=64``):
    the diagnosis scripts' way to run a model at a size between the suites'."""
    (entry,), _ = select_models(suite, [name])
    for kv in overrides:
        k, v = kv.split("=", 1)
        entry.configs[suite][k] = int(v)
    torch.manual_seed(0)
    return entry.build(suite, device)


def select_models(suite: str, names: list[str] | None) -> tuple[list[ZooEntry], list[str]]:
    """The entries to run, and one line for each optional package whose models are skipped."""
    wanted = expand_names(names, suite)
    entries = [e for e in all_entries() if e.name in wanted]
    keep, missing = [], {}
    for e in entries:
        errors = [probe(p) for p in e.requires]
        if e.requires and all(errors):
            missing.setdefault(" / ".join(e.requires), (errors[0], []))[1].append(e.name)
        else:
            keep.append(e)
    skipped = [f"skipped {', '.join(models)}: {pkgs} not importable ({err}); "
               f"pip install {pkgs.split(' / ')[0]}"
               for pkgs, (err, models) in missing.items()]
    return keep, skipped
