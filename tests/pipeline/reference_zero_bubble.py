#!/usr/bin/python3
"""Golden bubble figures for tests/pipeline/test_*_schedules.cpp from the zero-bubble authors' own
schedulers (github.com/sail-sg/zero-bubble-pipeline-parallelism, branch main).

    /usr/bin/python3 tests/pipeline/reference_zero_bubble.py PATH

PATH is a clone of that repository or its bare git directory. The scheduler files are read with
`git show HEAD:...`, copied into a scratch package, and run offline with F = B = W = 1 and no transfer
cost. zb.py imports pulp for its ILP, which this script does not use (only the heuristic
`initial_solution`), so a placeholder module stands in for it. Prints one line per (kind, P, M):
the longest stage (its first op's start to its last op's end), its bubble (that minus the
stage's work), and the peak activations per stage (a forward held until its W; for
the V kinds one unit is one chunk, half a stage).
"""
import os
import subprocess
import sys
import tempfile
import types

SCHEDULER = "megatron/core/pipeline_parallel/zerobubble/scheduler"
FILES = ["graph.py", "zb.py", "zbv.py", "zbv_greedy.py"]


def stage_package(repo):
    git = ["git", "--git-dir", repo] if not os.path.isdir(os.path.join(repo, ".git")) else ["git", "-C", repo]
    commit = subprocess.check_output(git + ["rev-parse", "HEAD"], text=True).strip()
    root = tempfile.mkdtemp(prefix="zb_reference_")
    package = os.path.join(root, SCHEDULER)
    os.makedirs(package)
    for d in ["megatron", "megatron/core", "megatron/core/pipeline_parallel",
              "megatron/core/pipeline_parallel/zerobubble", SCHEDULER]:
        open(os.path.join(root, d, "__init__.py"), "w").close()
    for name in FILES:
        text = subprocess.check_output(git + ["show", f"HEAD:{SCHEDULER}/{name}"], text=True)
        with open(os.path.join(package, name), "w") as f:
            f.write(text)
    sys.path.insert(0, root)
    sys.modules.setdefault("pulp", types.ModuleType("pulp"))
    return commit


def peaks(orders, is_forward, is_weight):
    out = []
    for order in orders:
        held = peak = 0
        for op in order:
            held += 1 if is_forward(op) else -1 if is_weight(op) else 0
            peak = max(peak, held)
        out.append(peak)
    return max(out)


def v_half_and_min(kind, p, m, f=1, b=1, w=1):
    from megatron.core.pipeline_parallel.zerobubble.scheduler import zbv_greedy
    graph = zbv_greedy.PipelineGraph(p, m, kind, f, b, w, 0)
    pattern = getattr(graph, "stable_pattern_v_" + kind)(p)
    cost = [f, f, b, b, w, w]
    _, starts, orders = graph.schedule_from_pattern(pattern, m, cost)
    # starts[stage][type][micro-batch], orders[stage]: (type, micro-batch), types F f B b W w = 0..5.
    # The longest stage from its first op's start to its last op's end (the scheduler's own figure
    # takes the end of the last chunk-0 W, which is the same with equal times).
    global last_orders
    last_orders = orders
    longest = max(max(starts[s][t][mb] + cost[t] for t, mb in orders[s]) - min(starts[s][t][mb] for t, mb in orders[s])
                  for s in range(p))
    return longest, longest - 2 * m * (f + b + w), peaks(orders, lambda op: op[0] < 2, lambda op: op[0] >= 4)

def zb_v(p, m):
    from megatron.core.pipeline_parallel.zerobubble.scheduler import zbv
    graph = zbv.PipelineGraph(p, m, 1, 1, 1, 0, 1, 0, -1)
    best = None
    for fill_b in [True, False]:
        for fill_f in [True, False]:
            schedule, end_time, bubble = graph.try_v_schedule(fill_b=fill_b, fill_f=fill_f)
            if best is None or bubble < best[2]:
                best = (schedule, end_time, bubble)
    schedule, _, bubble = best
    # schedule: per stage (category F B W = 0..2, chunk, micro-batch)
    return 6 * m + bubble, bubble, peaks(schedule, lambda op: op[0] == 0, lambda op: op[0] == 2)


def zb_heuristic(p, m, held):
    from megatron.core.pipeline_parallel.zerobubble.scheduler import zb
    from megatron.core.pipeline_parallel.zerobubble.scheduler.graph import GraphConfig
    config = GraphConfig(mem_f=[1.0] * p, mem_b=[0.0] * p, mem_w=[-1.0] * p, max_mem=[float(held)] * p,
                         cost_f=[1.0] * p, cost_b=[1.0] * p, cost_w=[1.0] * p, cost_comm=0.0,
                         n_stages=p, n_micro=m)
    graph = zb.Graph.build_graph(p, m, config)
    longest, order, end = zb.initial_solution(graph, print_result=False)
    orders = []
    for stage in range(p):
        ids = [graph.get_id(t, stage, mb) for t in range(3) for mb in range(m)]
        orders.append(sorted(ids, key=lambda i: end[i]))
    kind_of = lambda i: i // (p * m)
    return longest, longest - 3 * m, peaks(orders, lambda i: kind_of(i) == 0, lambda i: kind_of(i) == 2)


last_orders = None
NAMES = ["F{}.0", "F{}.1", "Bi{}.1", "Bi{}.0", "W{}.1", "W{}.0"]   # F f B b W w in pipewright's text form


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: reference_zero_bubble.py PATH-TO-zero-bubble-pipeline-parallelism")
    commit = stage_package(sys.argv[1])
    print(f"# sail-sg/zero-bubble-pipeline-parallelism {commit}, F = B = W = 1, no transfer cost")
    print("# kind P M longest-stage bubble peak")
    import contextlib, io
    for p, m in [(2, 4), (2, 8), (3, 6), (4, 8), (4, 16), (5, 10), (6, 12), (8, 16)]:
        with contextlib.redirect_stdout(io.StringIO()):   # the reference schedulers print progress
            rows = [("zb-1p", *zb_heuristic(p, m, p)), ("zb-2p", *zb_heuristic(p, m, 2 * p - 1)),
                    ("zb-v", *zb_v(p, m)), ("v-half", *v_half_and_min("half", p, m)),
                    ("v-min", *v_half_and_min("min", p, m))]
        for kind, longest, bubble, peak in rows:
            print(f"{kind} {p} {m} {longest:g} {bubble:g} {peak:g}")
    print("# v-half and v-min programs, P = 2, M = 4 (stage: ops)")
    for kind in ["half", "min"]:
        with contextlib.redirect_stdout(io.StringIO()):
            v_half_and_min(kind, 2, 4)
        for stage, order in enumerate(last_orders):
            print(f"v-{kind} {stage}: " + " ".join(NAMES[t].format(mb) for t, mb in order))
    print("# v-half and v-min with unequal times F, B, W per chunk op")
    print("# kind F B W P M longest-stage bubble peak")
    for f, b, w in [(2, 3, 1), (3, 2, 2)]:
        for p, m in [(4, 8), (4, 16), (6, 12), (6, 24)]:
            for kind in ["half", "min"]:
                with contextlib.redirect_stdout(io.StringIO()):
                    longest, bubble, peak = v_half_and_min(kind, p, m, f, b, w)
                print(f"v-{kind} {f} {b} {w} {p} {m} {longest:g} {bubble:g} {peak:g}")

if __name__ == "__main__":
    main()
