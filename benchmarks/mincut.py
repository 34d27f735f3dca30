"""ember's min-cut (Dinic, ``ember.autograd.partition.FlowNetwork``) against networkx's ``minimum_cut`` on the
flow networks the partitioner builds for the zoo's training graphs: the same cut value, and the time of each.

    python benchmarks/mincut.py [--models mlp,resnet,encoder,nanogpt] [--reps 5]

The networks are recorded while ``ember.compile`` compiles one training step of each model (a subclass of
``FlowNetwork`` that keeps its edges, installed for the run); each is then solved again by both solvers.
Prints one JSON line per distinct network and a summary line."""
from __future__ import annotations

import argparse
import json
import statistics
import time

import networkx as nx
import torch

import ember
from ember.autograd import partition
from ember.bench.zoo import HANDWRITTEN

NETWORKS: list[tuple[str, int, list, int, int]] = []


class Recording(partition.FlowNetwork):
    """A FlowNetwork that remembers its edges and the (source, sink) it is solved for."""

    def __init__(self, n: int) -> None:
        super().__init__(n)
        self.n, self.edges = n, []

    def add_edge(self, u: int, v: int, cap: int) -> None:
        self.edges.append((u, v, cap))
        super().add_edge(u, v, cap)

    def max_flow(self, s: int, t: int) -> int:
        NETWORKS.append((MODEL[0], self.n, list(self.edges), s, t))
        return super().max_flow(s, t)


MODEL = [""]


def _ember(n: int, edges: list, s: int, t: int) -> int:
    net = partition.FlowNetwork(n)
    for u, v, c in edges:
        net.add_edge(u, v, c)
    return net.max_flow(s, t)


def _networkx(n: int, edges: list, s: int, t: int) -> int:
    g = nx.DiGraph()
    g.add_nodes_from(range(n))
    for u, v, c in edges:        # parallel edges add up, as in the Dinic network
        if g.has_edge(u, v):
            g[u][v]["capacity"] += c
        else:
            g.add_edge(u, v, capacity=c)
    value, _ = nx.minimum_cut(g, s, t)
    return int(value)


def _median_time(fn, reps: int) -> tuple[float, int]:
    times, out = [], None
    for _ in range(reps):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="mlp,resnet,encoder,nanogpt")
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    partition.FlowNetwork = Recording       # this script's measurement hook: record what the partitioner solves
    for entry in HANDWRITTEN:
        if entry.name not in a.models.split(","):
            continue
        MODEL[0] = entry.name
        w = entry.build("quick", torch.device("cpu"))
        inputs = w.make_inputs(0, torch.device("cpu"))
        ember.reset()
        out = ember.compile(w.model)(*inputs.args, **inputs.kwargs)
        w.loss(out, inputs.target).backward()
    rows, seen = [], set()
    for name, n, edges, s, t in NETWORKS:
        key = (n, tuple(edges), s, t)
        if key in seen:         # the partitioner solves the same network for each variant of a graph
            continue
        seen.add(key)
        te, ve = _median_time(lambda: _ember(n, edges, s, t), a.reps)
        tn, vn = _median_time(lambda: _networkx(n, edges, s, t), a.reps)
        row = {"model": name, "nodes": n, "edges": len(edges), "ember_ms": round(te * 1e3, 3),
               "networkx_ms": round(tn * 1e3, 3), "same_cut": ve == vn}
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(json.dumps({"networks": len(rows), "all_same_cut": all(r["same_cut"] for r in rows),
                      "ember_total_ms": round(sum(r["ember_ms"] for r in rows), 2),
                      "networkx_total_ms": round(sum(r["networkx_ms"] for r in rows), 2)}))


if __name__ == "__main__":
    main()
