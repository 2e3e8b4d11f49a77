"""bench/dp_vs_ddp --model gpt end to end on a tiny GPT.

    python3 tests/bench/test_dp_vs_ddp_gpt.py PROGRAM OUT_DIR

Every mode must reproduce single's parameters (the program exits 1 otherwise), and the JSON must
show the bucket sweep: a smaller cap cuts the same gradients into more buckets; every cap's buckets
hold the whole model; a bucket is closed by the parameter that takes it to its cap, so without that
one parameter it is under the cap (DDP never splits a parameter, as PyTorch's); and the largest cap
holds this tiny model in one bucket.
"""
import json
import os
import subprocess
import sys

program, out_dir = sys.argv[1], sys.argv[2]
os.makedirs(out_dir, exist_ok=True)
result = os.path.join(out_dir, "r.json")
caps = [0.01, 0.05, 25]
run = subprocess.run([program, "--model", "gpt", "--gpt-layers", "2", "--gpt-width", "32", "--gpt-heads", "2",
                      "--context", "8", "--batch", "6", "--steps", "2", "--warmup", "1",
                      "--caps", ",".join(map(str, caps)), "--no-torch", "--json", result],
                     capture_output=True, text=True, timeout=150)
assert run.returncode == 0, "dp_vs_ddp --model gpt exited %d\n%s\n%s" % (run.returncode, run.stdout, run.stderr)
for text in ["model=GPT 2 layers, width 32, 2 heads, context 8", "how each DDP mode cut the gradients into buckets"]:
    assert text in run.stdout, "the output lacks %r:\n%s" % (text, run.stdout)

doc = json.load(open(result))
assert doc["run"]["model_kind"] == "gpt" and doc["run"]["gpt"]["layers"] == 2, doc["run"]
rows = {m["id"]: m for m in doc["modes"]}
for mode in ["single", "dp", "ddp-naive", "ddp-flat", "ddp-overlap", "ddp-no_sync"]:
    assert mode in rows, "no row %s: %s" % (mode, sorted(rows))
    assert rows[mode]["correct"] in (True, None), (mode, rows[mode])

# Every parameter tensor of a GPT: wte, wpe, ln_f (2) and 12 per block.
parameters = 4 + 12 * 2
assert len(rows["ddp-naive"]["bucket_mb"]) == parameters, rows["ddp-naive"]["bucket_mb"]
assert len(rows["ddp-flat"]["bucket_mb"]) == 1, rows["ddp-flat"]["bucket_mb"]
total = sum(rows["ddp-flat"]["bucket_mb"])
largest_parameter = max(rows["ddp-naive"]["bucket_mb"])
counts = []
for cap in caps:
    row = rows["ddp-bucketed-%gMB" % cap]
    buckets = row["bucket_mb"]
    assert row["correct"] is True, row
    assert abs(sum(buckets) - total) < 1e-9, (cap, sum(buckets), total)
    first_cap = row["first_bucket_cap_mb"]
    assert first_cap == min(1.0, cap), (cap, first_cap)
    for k, mb in enumerate(buckets):
        limit = first_cap if k == 0 else cap
        assert mb - largest_parameter < limit, (cap, k, mb, buckets)
    counts.append(len(buckets))
assert counts == sorted(counts, reverse=True) and counts[0] > counts[-1], counts
assert counts[-1] == 1, counts
print("dp_vs_ddp --model gpt: every mode correct; caps %s MB cut %.3f MB into %s buckets" % (caps, total, counts))
