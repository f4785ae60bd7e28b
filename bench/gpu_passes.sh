#!/usr/bin/env bash
# Issue 18's JAX ratios on a GPU machine (the `device` tool's `run`): seqc with its passes,
# seqc without, and the tight hand-written JAX model, at the benchmark LM's size and at a
# larger one (d 1024, 8 layers, 16 heads, V 32,000, 32 x 512 tokens), float32; at the larger
# size also with the graph passes alone and with fuse_loss alone.
# The machine has JAX but not seqc's front end: wheels of lark and pydantic carried in .whl
# (see the device README) are installed first when present. Figures land in $OUT.
set -u
out=${OUT:-/tmp}
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:${PYTHONPATH:-} || exit 1
fi
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
python3 -c "import jax; print('jax', jax.__version__, jax.devices())"
python3 bench/passes_throughput.py --rounds 6 --steps 10 2>&1 | tee "$out/passes_default.txt"
large="--d 1024 --layers 8 --heads 16 --vocab 32000 --batch 32 --length 512 --rounds 6 --steps 5"
python3 bench/passes_throughput.py $large 2>&1 | tee "$out/passes_large.txt"
# which pass pays or costs: the four graph passes without fuse_loss, and fuse_loss alone
python3 bench/passes_throughput.py $large --passes fuse_matmul,fuse_attention,cse,dce 2>&1 \
  | tee "$out/passes_large_no_fuse_loss.txt"
python3 bench/passes_throughput.py $large --passes fuse_loss 2>&1 | tee "$out/passes_large_fuse_loss.txt"
