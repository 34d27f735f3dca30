"""A/B of the loop IR's reuse policy (``ember.loopir.lower.REUSE_POLICY``) on one zoo model: the step
time of ember under each policy, one fresh process per policy (bench/profile_model.py's measurement).

    python bench/reuse_policy_ab.py --policy exp,bcast --model encoder --task train

``--policy``: ``exp`` stores a reused value with an expensive op, ``bcast`` counts broadcast reads; ``none`` both off.
"""
from __future__ import annotations

import sys

import ember.loopir.lower as L


def main() -> None:
    args = sys.argv[1:]
    i = args.index("--policy")
    flags = set(args[i + 1].split(","))
    del args[i:i + 2]
    L.REUSE_POLICY = L.ReusePolicy(expensive_stored="exp" in flags, count_broadcast_reads="bcast" in flags)
    print("policy", L.REUSE_POLICY, flush=True)
    sys.argv = ["profile_model.py", *args]
    sys.path.insert(0, "bench")
    import profile_model
    profile_model.main()


if __name__ == "__main__":
    main()
