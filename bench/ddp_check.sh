#!/usr/bin/env bash
# Data-parallel training check (ktstream.training.distributed): a short DKT run on a simulated stream in
# float64, trained by one process without a process group (the reference) and data-parallel, each run's
# final weights compared with the reference's (exit 1 past 1e-9).
#   bash bench/ddp_check.sh          # with CUDA: NCCL (world size 1, one GPU) and gloo with 2 ranks on the GPU
#   bash bench/ddp_check.sh gloo     # gloo with 2 CPU processes only (no GPU needed)
# NCCL refuses two ranks on one GPU, so a one-GPU machine checks NCCL at world size 1 and the sharded
# gradient arithmetic with 2 gloo ranks on CUDA tensors.
set -euo pipefail
cd "$(dirname "$0")/.."
w=$(mktemp -d)
run() { OMP_NUM_THREADS=1 torchrun --standalone --nproc_per_node="$1" -m ktstream.training.distributed "${@:2}"; }
python -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')"
python -m ktstream.training.distributed --backend none --device cpu --save "$w/cpu-one.safetensors"
run 2 --backend gloo --device cpu --save "$w/cpu-gloo2.safetensors"
python -m ktstream.training.distributed --compare "$w/cpu-one.safetensors" "$w/cpu-gloo2.safetensors"
if [[ "${1:-all}" != "gloo" ]]; then
  python -c "import torch.distributed as d; assert d.is_nccl_available(), 'this torch has no NCCL'; print('nccl available')"
  python -m ktstream.training.distributed --backend none --device cuda --save "$w/cuda-one.safetensors"
  run 1 --backend nccl --device cuda --save "$w/cuda-nccl1.safetensors"
  run 2 --backend gloo --device cuda --save "$w/cuda-gloo2.safetensors"
  python -m ktstream.training.distributed --compare "$w/cuda-one.safetensors" "$w/cuda-nccl1.safetensors" \
    "$w/cuda-gloo2.safetensors"
  python -m ktstream.training.distributed --compare "$w/cpu-one.safetensors" "$w/cuda-one.safetensors" ||
    echo "(CPU and CUDA kernels round differently: a difference here is not a data-parallel fault)"
fi
rm -rf "$w"
