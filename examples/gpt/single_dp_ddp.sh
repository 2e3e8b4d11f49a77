#!/bin/sh
# examples/gpt/single_dp_ddp.sh GPT RINGRUN: the test example_gpt_single_dp_ddp_agree. Trains the same
# small GPT three ways -- on one device, with DataParallel over two logical CPU devices, and with DDP
# over two processes under ringrun -- and fails unless the three final held-out losses agree to 1e-4
# (each way splits one global batch, so they take the same steps up to float32 rounding).
gpt=$1
ringrun=$2
args="--steps 60 --layers 2 --width 32 --heads 2 --context 24 --batch-size 8 --eval-batches 4 --sample 0 --log-every 30"
loss() { sed -n 's/^\(\[rank 0\] \)\{0,1\}held-out loss \([0-9.]*\) .*/\2/p'; }
# shellcheck disable=SC2086  # $args is a list of words on purpose
one=$("$gpt" $args 2>&1 | tee /dev/stderr | loss)
dp=$("$gpt" --dp cpu:0,cpu:1 $args 2>&1 | tee /dev/stderr | loss)
ddp=$("$ringrun" --nproc-per-node 2 --master-port 0 "$gpt" --ddp $args 2>&1 | tee /dev/stderr | loss)
echo "held-out loss: one device '$one', DataParallel '$dp', DDP '$ddp'"
awk -v a="$one" -v b="$dp" -v c="$ddp" 'BEGIN {
  if (a == "" || b == "" || c == "") { print "a run did not finish"; exit 1 }
  d1 = a - b; d2 = a - c
  if (d1 > 1e-4 || -d1 > 1e-4 || d2 > 1e-4 || -d2 > 1e-4) { print "they differ by more than 1e-4"; exit 1 }
  print "they agree" }'
